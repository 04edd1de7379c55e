package scripts

import (
	"reflect"
	"testing"
)

func TestGCRALeaseCall(t *testing.T) {
	doc := "{}"
	c := GCRALease.Call(
		GCRALeaseKeys{LeaseID: "{l}:1", URLs: []string{"{l}:a"}},
		GCRALeaseArgs{TTLMs: 5, HTTPStatus: 200, JSONDoc: &doc, IDs: []string{"x", "y"}},
	)
	if !reflect.DeepEqual(c.Keys, []string{"{l}:1", "{l}:a"}) || !reflect.DeepEqual(c.Args, []string{"5", "200", "{}", "x", "y"}) {
		t.Errorf("Keys %q, Args %q", c.Keys, c.Args)
	}
	if gcraLeaseSource == "" {
		t.Error("no source")
	}
	var r GCRALeaseResult
	r.ID, r.APIOk, r.Idle = "x", true, 1
	_ = r
}
