package scripts

import (
	"reflect"
	"testing"
)

func TestLockAllCall(t *testing.T) {
	c := LockAll.Call(LockAllKeys{Resources: []string{"{r}:a", "{r}:b", "{r}:c"}}, LockAllArgs{Owner: "me", TTLMs: 5000})
	if want := []string{"{r}:a", "{r}:b", "{r}:c"}; !reflect.DeepEqual(c.Keys, want) || cap(c.Keys) != len(c.Keys) {
		t.Errorf("Keys = %q (cap %d), want %q", c.Keys, cap(c.Keys), want)
	}
	if want := []string{"me", "5000"}; !reflect.DeepEqual(c.Args, want) {
		t.Errorf("Args = %q, want %q", c.Args, want)
	}
	c = LockAll.Call(LockAllKeys{}, LockAllArgs{Owner: "me"})
	if len(c.Keys) != 0 || !reflect.DeepEqual(c.Args, []string{"me", "0"}) {
		t.Errorf("no resources: Keys %q, Args %q", c.Keys, c.Args)
	}
}

func TestTouchAllCall(t *testing.T) {
	c := TouchAll.Call(TouchAllKeys{Log: "{m}:log", Members: []string{"{m}:1", "{m}:2"}}, TouchAllArgs{})
	if want := []string{"{m}:log", "{m}:1", "{m}:2"}; !reflect.DeepEqual(c.Keys, want) {
		t.Errorf("Keys = %q, want %q", c.Keys, want)
	}
	if c.Args != nil || c.Script != &TouchAll.Script {
		t.Errorf("Args = %q, Script = %p", c.Args, c.Script)
	}
	c = TouchAll.Call(TouchAllKeys{Log: "{m}:log"}, TouchAllArgs{})
	if want := []string{"{m}:log"}; !reflect.DeepEqual(c.Keys, want) {
		t.Errorf("no members: Keys = %q, want %q", c.Keys, want)
	}
}
