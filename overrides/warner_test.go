package overrides

import (
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestWarner: one line per Every, the next one counting those left out.
func TestWarner(t *testing.T) {
	var buf logBuffer
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	w := Warner{Every: time.Hour}
	for range 5 {
		w.Warn(log, "override ignored", errors.New("bad"))
	}
	if n := len(buf.lines("override ignored")); n != 1 {
		t.Fatalf("5 warnings within Every logged %d lines, want 1", n)
	}
	w.last = w.last.Add(-time.Hour) // Every has passed
	w.Warn(log, "override ignored", errors.New("bad"))
	lines := buf.lines("override ignored")
	if len(lines) != 2 || !strings.Contains(lines[1], `"suppressed":4`) {
		t.Fatalf("after Every: %q, want a second line counting the 4 left out", lines)
	}
	var every Warner // the zero value logs every warning
	every.Warn(log, "each", errors.New("x"))
	every.Warn(log, "each", errors.New("x"))
	if n := len(buf.lines("each")); n != 2 {
		t.Fatalf("a zero Warner logged %d of 2 warnings", n)
	}
}
