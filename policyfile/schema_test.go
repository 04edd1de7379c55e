package policyfile_test

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"

	"github.com/sluice-go/sluice/policyfile"
)

func loadSchema(t *testing.T) map[string]any {
	t.Helper()
	var s map[string]any
	if err := json.Unmarshal(policyfile.Schema, &s); err != nil {
		t.Fatalf("schema.json: %v", err)
	}
	if s["$schema"] != "https://json-schema.org/draft/2020-12/schema" {
		t.Errorf("$schema = %v, want draft 2020-12", s["$schema"])
	}
	return s
}

// TestSchemaFields walks the schema and the parser's field lists: every
// object of the schema with properties is one the parser reads, with the
// same fields, and the other way round; the enums are the parser's.
func TestSchemaFields(t *testing.T) {
	s := loadSchema(t)
	want := policyfile.Fields
	got := map[string][]string{}
	var walk func(ptr string, v any)
	walk = func(ptr string, v any) {
		switch v := v.(type) {
		case map[string]any:
			if props, ok := v["properties"].(map[string]any); ok && ptr != "#/$defs/limit/if" {
				var names []string
				for k := range props {
					names = append(names, k)
				}
				got[ptr] = names
				if v["additionalProperties"] != false {
					t.Errorf("%s: additionalProperties is not false: unknown fields would pass", ptr)
				}
			}
			for k, c := range v {
				walk(ptr+"/"+k, c)
			}
		case []any:
			for i, c := range v {
				walk(fmt.Sprintf("%s/%d", ptr, i), c)
			}
		}
	}
	for k, c := range s {
		walk("#/"+k, c)
	}
	// the root's properties are walked as #/properties: name the root "#"
	rootProps := s["properties"].(map[string]any)
	var root []string
	for k := range rootProps {
		root = append(root, k)
	}
	got["#"] = root
	for ptr := range got {
		if strings.HasPrefix(ptr, "#/properties") && ptr != "#" {
			continue
		}
		if _, ok := want[ptr]; !ok && ptr != "#/properties" {
			t.Errorf("schema object %s has properties the parser does not know as an object", ptr)
		}
	}
	for ptr, fields := range want {
		g := slices.Clone(got[ptr])
		w := slices.Clone(fields)
		sort.Strings(g)
		sort.Strings(w)
		if !slices.Equal(g, w) {
			t.Errorf("%s: schema fields %v, parser fields %v", ptr, g, w)
		}
	}
	defs := s["$defs"].(map[string]any)
	enum := func(v any) []string {
		var out []string
		for _, e := range v.(map[string]any)["enum"].([]any) {
			out = append(out, e.(string))
		}
		return out
	}
	props := func(def string) map[string]any { return defs[def].(map[string]any)["properties"].(map[string]any) }
	for name, pair := range map[string][2][]string{
		"headers":        {enum(rootProps["headers"]), policyfile.HeaderModes},
		"algorithm":      {enum(props("limit")["algorithm"]), policyfile.Algorithms},
		"failure":        {enum(props("limiter")["failure"]), policyfile.FailureModes},
		"ip header":      {enum(props("ip")["header"]), policyfile.ProxyHeaders},
		"identity names": {enum(rootProps["identities"].(map[string]any)["propertyNames"].(map[string]any)["not"]), policyfile.IdentityKinds},
	} {
		if !slices.Equal(pair[0], pair[1]) {
			t.Errorf("%s: schema %v, parser %v", name, pair[0], pair[1])
		}
	}
}

// TestSchemaValidatesExamples checks every example file, and every full
// file of docs/policies.md, against the schema with a validator of the
// keywords it uses; and that the validator refuses what it must.
func TestSchemaValidatesExamples(t *testing.T) {
	s := loadSchema(t)
	files, _ := filepath.Glob("testdata/*.yaml")
	js, _ := filepath.Glob("testdata/*.json")
	files = append(append(files, js...), filepath.Join("..", "examples", "server", "policies.yaml"))
	var docs []string
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, string(data))
	}
	for _, b := range docBlocks(t) {
		files, docs = append(files, b.where), append(docs, b.text)
	}
	for i, f := range files {
		var v any
		if err := yaml.Unmarshal([]byte(docs[i]), &v); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if errs := validate(s, s, v, "$"); len(errs) > 0 {
			t.Errorf("%s does not validate:\n%s", f, strings.Join(errs, "\n"))
		}
	}
	bad := map[string]string{
		"unknown field":      "policies: [{name: p, limit: {algorithm: gcra, rate: 1, period: 1s}, key: ip, colour: red}]",
		"unknown algorithm":  "policies: [{name: p, limit: {algorithm: leaky, rate: 1, period: 1s}, key: ip}]",
		"missing key":        "policies: [{name: p, limit: {algorithm: gcra, rate: 1, period: 1s}}]",
		"bad duration":       "policies: [{name: p, limit: {algorithm: gcra, rate: 1, period: 1 minute}, key: ip}]",
		"lease without conc": "policies: [{name: p, limit: {algorithm: gcra, rate: 1, lease: 1s}, key: ip}]",
		"two kinds":          "policies: [{name: p, limit: {algorithm: gcra, rate: 1, period: 1s}, key: {ip: {}, subject: {}}}]",
		"two tier sources":   "tiers: {header: X, claim: c, default: a, policies: {a: []}}",
		"unknown top field":  "polices: []",
		"cost both":          "policies: [{name: p, limit: {algorithm: gcra, rate: 1, period: 1s}, key: ip, cost: {header: a, metadata: b}}]",
	}
	for name, src := range bad {
		var v any
		if err := yaml.Unmarshal([]byte(src), &v); err != nil {
			t.Fatal(err)
		}
		if errs := validate(s, s, v, "$"); len(errs) == 0 {
			t.Errorf("%s: the schema accepts %s", name, src)
		}
	}
}

// validate checks v against schema node n of root, for the keywords
// schema.json uses; it returns one line per violation.
func validate(root, n map[string]any, v any, at string) []string {
	var errs []string
	bad := func(format string, args ...any) { errs = append(errs, at+": "+fmt.Sprintf(format, args...)) }
	if ref, ok := n["$ref"].(string); ok {
		target := any(root)
		for _, p := range strings.Split(strings.TrimPrefix(ref, "#/"), "/") {
			target = target.(map[string]any)[p]
		}
		errs = append(errs, validate(root, target.(map[string]any), v, at)...)
	}
	if v2, ok := v.(map[any]any); ok { // yaml.v3 gives non-string keys so
		m := map[string]any{}
		for k, e := range v2 {
			m[fmt.Sprint(k)] = e
		}
		v = m
	}
	if ty, ok := n["type"]; ok {
		types := []any{ty}
		if l, ok := ty.([]any); ok {
			types = l
		}
		if !slices.ContainsFunc(types, func(t any) bool { return isType(v, t.(string)) }) {
			bad("want %v, got %T", ty, v)
			return errs
		}
	}
	if e, ok := n["enum"].([]any); ok && !slices.Contains(e, v) {
		bad("%v is not one of %v", v, e)
	}
	if c, ok := n["const"]; ok && c != v {
		bad("%v is not %v", v, c)
	}
	if s, ok := v.(string); ok {
		if p, ok := n["pattern"].(string); ok && !regexp.MustCompile(p).MatchString(s) {
			bad("%q does not match %s", s, p)
		}
		if m, ok := n["minLength"].(float64); ok && utf8.RuneCountInString(s) < int(m) {
			bad("%q is shorter than %v", s, m)
		}
	}
	if f, ok := number(v); ok {
		if m, ok := n["minimum"].(float64); ok && f < m {
			bad("%v is below %v", v, m)
		}
		if m, ok := n["maximum"].(float64); ok && f > m {
			bad("%v is above %v", v, m)
		}
	}
	if l, ok := v.([]any); ok {
		if m, ok := n["minItems"].(float64); ok && len(l) < int(m) {
			bad("fewer than %v items", m)
		}
		if items, ok := n["items"].(map[string]any); ok {
			for i, e := range l {
				errs = append(errs, validate(root, items, e, fmt.Sprintf("%s[%d]", at, i))...)
			}
		}
	}
	if m, ok := v.(map[string]any); ok {
		if r, ok := n["required"].([]any); ok {
			for _, k := range r {
				if _, ok := m[k.(string)]; !ok {
					bad("missing %s", k)
				}
			}
		}
		if c, ok := n["minProperties"].(float64); ok && len(m) < int(c) {
			bad("fewer than %v fields", c)
		}
		if c, ok := n["maxProperties"].(float64); ok && len(m) > int(c) {
			bad("more than %v fields", c)
		}
		props, _ := n["properties"].(map[string]any)
		for k, e := range m {
			if pn, ok := n["propertyNames"].(map[string]any); ok {
				errs = append(errs, validate(root, pn, k, at+"."+k+" (name)")...)
			}
			if p, ok := props[k]; ok {
				errs = append(errs, validate(root, p.(map[string]any), e, at+"."+k)...)
				continue
			}
			switch ap := n["additionalProperties"].(type) {
			case bool:
				if !ap {
					bad("unknown field %q", k)
				}
			case map[string]any:
				errs = append(errs, validate(root, ap, e, at+"."+k)...)
			}
		}
	}
	matches := func(key string) (int, []string) {
		l, _ := n[key].([]any)
		count, var0 := 0, []string(nil)
		for _, sub := range l {
			if e := validate(root, sub.(map[string]any), v, at); len(e) == 0 {
				count++
			} else {
				var0 = append(var0, e...)
			}
		}
		return count, var0
	}
	if _, ok := n["oneOf"]; ok {
		if c, why := matches("oneOf"); c != 1 {
			bad("matches %d of oneOf, want 1 (%s)", c, strings.Join(why, "; "))
		}
	}
	if _, ok := n["anyOf"]; ok {
		if c, why := matches("anyOf"); c == 0 {
			bad("matches none of anyOf (%s)", strings.Join(why, "; "))
		}
	}
	if not, ok := n["not"].(map[string]any); ok && len(validate(root, not, v, at)) == 0 {
		bad("matches what it must not: %v", not)
	}
	if cond, ok := n["if"].(map[string]any); ok {
		branch := "else"
		if len(validate(root, cond, v, at)) == 0 {
			branch = "then"
		}
		if b, ok := n[branch].(map[string]any); ok {
			errs = append(errs, validate(root, b, v, at)...)
		}
	}
	return errs
}

func number(v any) (float64, bool) {
	switch v := v.(type) {
	case int:
		return float64(v), true
	case int64:
		return float64(v), true
	case uint64:
		return float64(v), true
	case float64:
		return v, true
	}
	return 0, false
}

func isType(v any, t string) bool {
	switch t {
	case "null":
		return v == nil
	case "boolean":
		_, ok := v.(bool)
		return ok
	case "string":
		_, ok := v.(string)
		return ok
	case "array":
		_, ok := v.([]any)
		return ok
	case "object":
		_, ok := v.(map[string]any)
		return ok
	case "integer":
		f, ok := number(v)
		return ok && f == math.Trunc(f)
	case "number":
		_, ok := number(v)
		return ok
	}
	return false
}
