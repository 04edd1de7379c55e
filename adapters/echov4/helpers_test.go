package sluiceechov4_test

import (
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/sluice-go/sluice"
)

var oneAMinute = sluice.Must(sluice.FixedWindow(1, time.Minute))

func spoof(h http.Handler, xff string) int {
	r := httptest.NewRequest("GET", "/items/1", nil)
	r.RemoteAddr = "198.51.100.1:1"
	r.Header.Set("X-Forwarded-For", xff)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	return rec.Code
}
