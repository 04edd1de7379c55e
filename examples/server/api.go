package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"unicode/utf8"
)

// The API is the same on every framework; only the routing differs (see
// frameworks.go). Each route answers JSON.

// index is GET /.
func index() (int, any) {
	return http.StatusOK, map[string]string{"message": "hello, world"}
}

// hello is GET /hello/{name}.
func hello(name string) (int, any) {
	if name == "" || len(name) > 64 || !utf8.ValidString(name) || strings.ContainsFunc(name, isControl) {
		return http.StatusBadRequest, map[string]string{"error": "name must be 1 to 64 printable characters"}
	}
	return http.StatusOK, map[string]string{"message": "hello, " + name}
}

// healthz is GET /healthz; it is exempt from rate limiting so that load
// balancers and orchestrators never see a 429.
func healthz() (int, any) {
	return http.StatusOK, map[string]string{"status": "ok"}
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

// writeJSON writes v with status code, for the net/http-based routers.
func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
