package luart

import (
	"fmt"
	"strconv"
	"sync/atomic"

	"github.com/redis/rueidis"
)

// Decoder reads the elements of one script reply. Generated DecodeReply
// methods create one per reply, read each declared element by index and
// return Err. The first problem is kept; later reads return zero values.
type Decoder struct {
	script string
	elems  []rueidis.RedisMessage // a rueidis reply's elements
	vals   []any                  // or those of a reply FromValue
	err    error
	list   bool // the last reply element is a list: at least n elements
}

// NewDecoder is NewReplyDecoder of FromRueidis(r), for code generated
// before DecodeReply existed.
func NewDecoder(s *Script, r rueidis.RedisResult, n int) *Decoder {
	d := &Decoder{}
	d.init(s, FromRueidis(r), n)
	return d
}

// NewListDecoder is NewListReplyDecoder of FromRueidis(r).
func NewListDecoder(s *Script, r rueidis.RedisResult, n int) *Decoder {
	d := &Decoder{list: true}
	d.init(s, FromRueidis(r), n)
	return d
}

// NewReplyDecoder checks that r holds no error and, when n > 0, is an
// array of exactly n elements. A script that declares no reply elements
// (n == 0) accepts any reply.
func NewReplyDecoder(s *Script, r Reply, n int) *Decoder {
	// Small enough to inline, so a Decoder that does not outlive its
	// DecodeReply method stays on the stack.
	d := &Decoder{}
	d.init(s, r, n)
	return d
}

// NewListReplyDecoder is NewReplyDecoder for a script whose last reply
// element is a list: r must be an array of at least n elements (the fixed
// ones), and the list is every element after them (Ints, Floats, Bools,
// Strings).
func NewListReplyDecoder(s *Script, r Reply, n int) *Decoder {
	d := &Decoder{list: true}
	d.init(s, r, n)
	return d
}

func (d *Decoder) init(s *Script, r Reply, n int) {
	d.script = "?"
	if s != nil {
		d.script = s.Name
	}
	if err := r.Err(); err != nil {
		d.err = &Error{Script: d.script, Err: err}
		return
	}
	if n == 0 && !d.list {
		return
	}
	if r.value {
		arr, ok := r.val.([]any)
		if !ok {
			d.err = &Error{Script: d.script, Err: fmt.Errorf("%w: want an array of %d elements, got %s", ErrMalformedReply, n, describeValue(r.val))}
			return
		}
		if d.count(len(arr), n) {
			d.vals = arr
			if d.vals == nil {
				d.vals = []any{} // non-nil: the accessors read vals, not elems
			}
		}
		return
	}
	msg, err := r.res.ToMessage()
	if err != nil {
		d.err = &Error{Script: d.script, Err: err}
		return
	}
	if !msg.IsArray() {
		d.err = &Error{Script: d.script, Err: fmt.Errorf("%w: want an array of %d elements, got %s", ErrMalformedReply, n, describe(&msg))}
		return
	}
	elems, _ := msg.ToArray()
	if d.count(len(elems), n) {
		d.elems = elems
	}
}

// count checks that a reply of got elements fits n declared ones.
func (d *Decoder) count(got, n int) bool {
	if d.list && got < n {
		d.err = &Error{Script: d.script, Err: fmt.Errorf("%w: want at least %d elements, got %d", ErrMalformedReply, n, got)}
		return false
	}
	if !d.list && got != n {
		d.err = &Error{Script: d.script, Err: fmt.Errorf("%w: want %d elements, got %d", ErrMalformedReply, n, got)}
		return false
	}
	return true
}

// Err returns the first problem met, wrapped in *Error.
func (d *Decoder) Err() error { return d.err }

func (d *Decoder) fail(i int, name, want string, m *rueidis.RedisMessage) {
	if d.err == nil {
		d.err = &Error{Script: d.script, Err: fmt.Errorf("%w: element %d (%s): want %s, got %s", ErrMalformedReply, i+1, name, want, describe(m))}
	}
}

// failValue is fail for an element of a reply FromValue.
func (d *Decoder) failValue(i int, name, want string, v any) {
	if d.err == nil {
		d.err = &Error{Script: d.script, Err: fmt.Errorf("%w: element %d (%s): want %s, got %s", ErrMalformedReply, i+1, name, want, describeValue(v))}
	}
}

// val is element i of a reply FromValue; false when there is none to read.
func (d *Decoder) val(i int) (any, bool) {
	if d.err != nil || i < 0 || i >= len(d.vals) {
		return nil, false
	}
	return d.vals[i], true
}

// size is the number of the reply's elements.
func (d *Decoder) size() int {
	if d.vals != nil {
		return len(d.vals)
	}
	return len(d.elems)
}

func (d *Decoder) elem(i int) *rueidis.RedisMessage {
	if d.err != nil || i < 0 || i >= len(d.elems) {
		return nil
	}
	return &d.elems[i]
}

// Int reads element i as an integer.
func (d *Decoder) Int(i int, name string) int64 {
	if d.vals != nil {
		v, ok := d.val(i)
		if !ok {
			return 0
		}
		if n, ok := v.(int64); ok {
			return n
		}
		d.failValue(i, name, "an integer", v)
		return 0
	}
	m := d.elem(i)
	if m == nil {
		return 0
	}
	if m.IsInt64() {
		v, _ := m.ToInt64()
		return v
	}
	d.fail(i, name, "an integer", m)
	return 0
}

// Bool reads element i as a boolean: integer 1 or RESP3 true is true; 0,
// nil (Lua false under RESP2) or RESP3 false is false.
func (d *Decoder) Bool(i int, name string) bool {
	if d.vals != nil {
		v, ok := d.val(i)
		if !ok {
			return false
		}
		switch b := v.(type) {
		case nil:
			return false
		case bool:
			return b
		case int64:
			if b == 0 || b == 1 {
				return b == 1
			}
		}
		d.failValue(i, name, "a boolean (1, 0, true, false or nil)", v)
		return false
	}
	m := d.elem(i)
	if m == nil {
		return false
	}
	switch {
	case m.IsNil():
		return false
	case m.IsBool():
		v, _ := m.ToBool()
		return v
	case m.IsInt64():
		v, _ := m.ToInt64()
		if v == 0 || v == 1 {
			return v == 1
		}
	}
	d.fail(i, name, "a boolean (1, 0, true, false or nil)", m)
	return false
}

// String reads element i as a bulk or simple string.
func (d *Decoder) String(i int, name string) string {
	if d.vals != nil {
		v, ok := d.val(i)
		if !ok {
			return ""
		}
		if str, ok := v.(string); ok {
			return str
		}
		d.failValue(i, name, "a string", v)
		return ""
	}
	m := d.elem(i)
	if m == nil {
		return ""
	}
	if m.IsString() {
		v, _ := m.ToString()
		return v
	}
	d.fail(i, name, "a string", m)
	return ""
}

// Ints reads elements i onwards (the list a script's last @return
// declares) as integers: nil when there are none.
func (d *Decoder) Ints(i int, name string) []int64 { return list(d, i, name, d.Int) }

// Floats reads elements i onwards as numbers, as Float does.
func (d *Decoder) Floats(i int, name string) []float64 { return list(d, i, name, d.Float) }

// Bools reads elements i onwards as booleans, as Bool does.
func (d *Decoder) Bools(i int, name string) []bool { return list(d, i, name, d.Bool) }

// Strings reads elements i onwards as strings, as String does.
func (d *Decoder) Strings(i int, name string) []string { return list(d, i, name, d.String) }

func list[T any](d *Decoder, i int, name string, one func(int, string) T) []T {
	if d.err != nil || i >= d.size() {
		return nil
	}
	out := make([]T, d.size()-i)
	for j := range out {
		out[j] = one(i+j, name)
	}
	if d.err != nil {
		return nil
	}
	return out
}

// Float reads element i as a number: a string holding a decimal number, an
// integer, or a RESP3 double.
func (d *Decoder) Float(i int, name string) float64 {
	if d.vals != nil {
		v, ok := d.val(i)
		if !ok {
			return 0
		}
		switch f := v.(type) {
		case float64:
			return f
		case int64:
			return float64(f)
		case string:
			if x, err := strconv.ParseFloat(f, 64); err == nil {
				return x
			}
		}
		d.failValue(i, name, "a number", v)
		return 0
	}
	m := d.elem(i)
	if m == nil {
		return 0
	}
	switch {
	case m.IsFloat64():
		v, _ := m.ToFloat64()
		return v
	case m.IsInt64():
		v, _ := m.ToInt64()
		return float64(v)
	case m.IsString():
		s, _ := m.ToString()
		if v, err := strconv.ParseFloat(s, 64); err == nil {
			return v
		}
	}
	d.fail(i, name, "a number", m)
	return 0
}

// describeValue is describe for a value of a reply FromValue.
func describeValue(v any) string {
	switch x := v.(type) {
	case nil:
		return "nil"
	case int64:
		return fmt.Sprintf("integer %d", x)
	case bool:
		return fmt.Sprintf("boolean %t", x)
	case float64:
		return fmt.Sprintf("double %g", x)
	case string:
		if len(x) > 32 {
			x = x[:32] + "..."
		}
		return fmt.Sprintf("string %q", x)
	case []any:
		return fmt.Sprintf("array of %d", len(x))
	case error:
		msg := x.Error()
		if len(msg) > 32 {
			msg = msg[:32] + "..."
		}
		return fmt.Sprintf("error reply %q", msg)
	}
	return fmt.Sprintf("reply of another type (%T)", v)
}

func describe(m *rueidis.RedisMessage) string {
	switch {
	case m == nil:
		return "nothing"
	case m.IsNil():
		return "nil"
	case m.IsInt64():
		v, _ := m.ToInt64()
		return fmt.Sprintf("integer %d", v)
	case m.IsBool():
		v, _ := m.ToBool()
		return fmt.Sprintf("boolean %t", v)
	case m.IsFloat64():
		v, _ := m.ToFloat64()
		return fmt.Sprintf("double %g", v)
	case m.IsString():
		s, _ := m.ToString()
		if len(s) > 32 {
			s = s[:32] + "..."
		}
		return fmt.Sprintf("string %q", s)
	case m.IsArray():
		a, _ := m.ToArray()
		return fmt.Sprintf("array of %d", len(a))
	}
	return "reply of another type"
}

// Argument formatting used by generated code. Integers are written in
// decimal, floats in the shortest decimal form that reads back exactly (no
// exponent, so Lua's tonumber agrees on every engine), booleans as 1 or 0,
// and an unset optional argument as the empty string (tonumber("") is nil).

// FormatInt formats an int argument.
//
// The same values come back call after call (a limit's rate, period and
// burst), so FormatInt keeps the decimal form of recent ones in a small
// cache shared by all goroutines and formats each only once: building a
// call does not allocate for them. Values below 100 never allocate
// anyway; values from 2^50 up (clock readings in µs) change on every call
// and are formatted each time.
func FormatInt(v int64) string {
	if v < 100 || v >= 1<<50 {
		return strconv.FormatInt(v, 10)
	}
	slot := &intStrings[(uint64(v)*0x9E3779B97F4A7C15)>>(64-intStringBits)]
	if e := slot.Load(); e != nil && e.v == v {
		return e.s
	}
	e := &intString{v: v, s: strconv.FormatInt(v, 10)}
	slot.Store(e)
	return e.s
}

// intString is one cached decimal form: s is v in base 10.
type intString struct {
	v int64
	s string
}

// intStrings is FormatInt's cache: direct-mapped, one value per slot, the
// latest formatted value wins its slot.
const intStringBits = 10

var intStrings [1 << intStringBits]atomic.Pointer[intString]

// FormatFloat formats a float argument.
func FormatFloat(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

// FormatBool formats a bool argument as "1" or "0".
func FormatBool(v bool) string {
	if v {
		return "1"
	}
	return "0"
}

// FormatOptInt formats an optional int argument; nil is "".
func FormatOptInt(v *int64) string {
	if v == nil {
		return ""
	}
	return FormatInt(*v)
}

// FormatOptFloat formats an optional float argument; nil is "".
func FormatOptFloat(v *float64) string {
	if v == nil {
		return ""
	}
	return FormatFloat(*v)
}

// FormatOptBool formats an optional bool argument; nil is "".
func FormatOptBool(v *bool) string {
	if v == nil {
		return ""
	}
	return FormatBool(*v)
}

// FormatOptString formats an optional string argument; nil is "".
func FormatOptString(v *string) string {
	if v == nil {
		return ""
	}
	return *v
}
