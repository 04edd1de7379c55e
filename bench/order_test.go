package bench_test

import (
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestRunOrder checks the run order: every cell once, and the two cells
// of each target in one block, so they are measured back to back.
func TestRunOrder(t *testing.T) {
	var cells []cell
	add := func(id string) {
		f := strings.Split(id, "/")
		g, err := strconv.Atoi(f[2])
		if err != nil {
			t.Fatal(err)
		}
		cells = append(cells, cell{group: f[0], name: f[1], g: g})
	}
	for _, id := range []string{"throughput/sluice/1", "throughput/sluice/128", "throughput/throttled/128"} {
		add(id)
	}
	for _, tg := range targets {
		for _, id := range []string{tg.num, tg.den} {
			if !slices.ContainsFunc(cells, func(c cell) bool { return c.id() == id }) {
				add(id)
			}
		}
	}
	add("algorithms/fixed_window/1")
	blocks := runOrder(cells)
	in := map[string]int{}
	for bi, b := range blocks {
		for _, c := range b {
			if _, dup := in[c.id()]; dup {
				t.Fatalf("%s is in two blocks", c.id())
			}
			in[c.id()] = bi
		}
	}
	if len(in) != len(cells) {
		t.Fatalf("the blocks hold %d cells, want %d", len(in), len(cells))
	}
	for _, tg := range targets {
		if in[tg.num] != in[tg.den] {
			t.Errorf("%s: %s and %s are in blocks %d and %d", tg.what, tg.num, tg.den, in[tg.num], in[tg.den])
		}
	}
	// Cells of no target stay alone; a block takes the place of its first cell.
	if b := blocks[in["throughput/throttled/128"]]; len(b) != 1 {
		t.Errorf("throttled/128 shares a block: %v", cellIDs(b))
	}
	want := []string{"throughput/sluice/1", "throughput/evalsha_gcra/1", "throughput/redis_rate/1"}
	if got := cellIDs(blocks[0]); !slices.Equal(got, want) {
		t.Errorf("first block %v, want %v", got, want)
	}
	if got := cellIDs(blocks[len(blocks)-1]); len(got) != 1 || got[0] != "algorithms/fixed_window/1" {
		t.Errorf("last block %v, want fixed_window/1 alone", got)
	}
	// A subset (-only) keeps what it can: a target with one cell missing
	// leaves the other alone.
	one := runOrder([]cell{cells[0]})
	if len(one) != 1 || len(one[0]) != 1 {
		t.Errorf("one cell: %v blocks", len(one))
	}
}

func cellIDs(cells []cell) []string {
	out := make([]string, len(cells))
	for i, c := range cells {
		out[i] = c.id()
	}
	return out
}
