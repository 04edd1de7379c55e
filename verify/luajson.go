package verify

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"

	lua "github.com/yuin/gopher-lua"
)

// cjsonLib is the cjson table of Redis scripts: encode, decode and null,
// following lua-cjson's defaults (numbers with 14 significant digits, '/'
// escaped, an empty table encoded as {}, excessively sparse arrays
// refused). Object keys are encoded in sorted order, where Redis uses the
// table's iteration order.
func (rs *runState) cjsonLib() *lua.LTable {
	L := rs.L
	t := L.NewTable()
	t.RawSetString("encode", L.NewFunction(func(L *lua.LState) int {
		if L.GetTop() != 1 {
			L.RaiseError("bad argument #1 to 'encode' (expected 1 argument)")
		}
		var b strings.Builder
		if err := rs.encodeJSON(&b, L.Get(1), 0); err != nil {
			L.RaiseError("%s", err.Error())
		}
		L.Push(lua.LString(b.String()))
		return 1
	}))
	t.RawSetString("decode", L.NewFunction(func(L *lua.LState) int {
		s := L.CheckString(1)
		v, err := rs.decodeJSON(s)
		if err != nil {
			L.RaiseError("%s", err.Error())
		}
		L.Push(v)
		return 1
	}))
	t.RawSetString("null", rs.null)
	return t
}

func (rs *runState) encodeJSON(b *strings.Builder, v lua.LValue, depth int) error {
	if depth > 1000 {
		return fmt.Errorf("Cannot serialise, excessive nesting (%d)", depth+1)
	}
	switch v := v.(type) {
	case *lua.LNilType:
		b.WriteString("null")
	case lua.LBool:
		b.WriteString(strconv.FormatBool(bool(v)))
	case lua.LNumber:
		f := float64(v)
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return errors.New("Cannot serialise number: must not be NaN or Inf")
		}
		b.WriteString(formatG(f, 14))
	case lua.LString:
		writeJSONString(b, string(v))
	case *lua.LUserData:
		if v != rs.null {
			return errors.New("Cannot serialise userdata: type not supported")
		}
		b.WriteString("null")
	case *lua.LTable:
		return rs.encodeTable(b, v, depth)
	default:
		return fmt.Errorf("Cannot serialise %s: type not supported", v.Type().String())
	}
	return nil
}

func (rs *runState) encodeTable(b *strings.Builder, t *lua.LTable, depth int) error {
	// An array has only positive integer keys and is not excessively
	// sparse (lua-cjson: more than 10 slots and over half of them empty).
	maxIndex, items, isArray := 0, 0, true
	t.ForEach(func(k, _ lua.LValue) {
		items++
		n, ok := k.(lua.LNumber)
		if !ok || float64(n) != math.Floor(float64(n)) || n < 1 {
			isArray = false
			return
		}
		maxIndex = max(maxIndex, int(n))
	})
	if isArray && items > 0 {
		if maxIndex > 10 && maxIndex > items*2 {
			return errors.New("Cannot serialise table: excessively sparse array")
		}
		b.WriteByte('[')
		for i := 1; i <= maxIndex; i++ {
			if i > 1 {
				b.WriteByte(',')
			}
			if err := rs.encodeJSON(b, t.RawGetInt(i), depth+1); err != nil {
				return err
			}
		}
		b.WriteByte(']')
		return nil
	}
	type member struct {
		key string
		val lua.LValue
	}
	var members []member
	var keyErr error
	t.ForEach(func(k, v lua.LValue) {
		switch k := k.(type) {
		case lua.LString:
			members = append(members, member{string(k), v})
		case lua.LNumber:
			members = append(members, member{formatG(float64(k), 14), v})
		default:
			keyErr = errors.New("Cannot serialise table: table key must be a number or string")
		}
	})
	if keyErr != nil {
		return keyErr
	}
	sort.Slice(members, func(i, j int) bool { return members[i].key < members[j].key })
	b.WriteByte('{')
	for i, m := range members {
		if i > 0 {
			b.WriteByte(',')
		}
		writeJSONString(b, m.key)
		b.WriteByte(':')
		if err := rs.encodeJSON(b, m.val, depth+1); err != nil {
			return err
		}
	}
	b.WriteByte('}')
	return nil
}

// writeJSONString escapes s as lua-cjson does: quotes, backslashes, '/'
// and control characters; other bytes pass through unchanged.
func writeJSONString(b *strings.Builder, s string) {
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch c {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '/':
			b.WriteString(`\/`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		default:
			if c < 0x20 || c == 0x7f {
				fmt.Fprintf(b, `\u%04x`, c)
			} else {
				b.WriteByte(c)
			}
		}
	}
	b.WriteByte('"')
}

func (rs *runState) decodeJSON(s string) (lua.LValue, error) {
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, jsonError(err, s)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("Expected the end but found invalid token at character %d", dec.InputOffset()+1)
	}
	return rs.jsonToLua(v), nil
}

func jsonError(err error, s string) error {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Errorf("Expected value but found invalid token at character %d", se.Offset)
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("Expected value but found T_END at character %d", len(s)+1)
	}
	return fmt.Errorf("cjson.decode: %v", err)
}

func (rs *runState) jsonToLua(v any) lua.LValue {
	switch v := v.(type) {
	case nil:
		return rs.null
	case bool:
		return lua.LBool(v)
	case json.Number:
		f, err := strconv.ParseFloat(string(v), 64)
		if err != nil {
			return lua.LNumber(math.Inf(1))
		}
		return lua.LNumber(f)
	case string:
		return lua.LString(v)
	case []any:
		t := rs.L.CreateTable(len(v), 0)
		for i, e := range v {
			t.RawSetInt(i+1, rs.jsonToLua(e))
		}
		return t
	case map[string]any:
		t := rs.L.CreateTable(0, len(v))
		for k, e := range v {
			t.RawSetString(k, rs.jsonToLua(e))
		}
		return t
	}
	return lua.LNil
}

// bitLib is LuaBitOp, the bit library of Redis scripts: 32-bit operations
// on numbers normalised with tobit.
func bitLib(L *lua.LState) *lua.LTable {
	t := L.NewTable()
	arg := func(L *lua.LState, i int) uint32 { return uint32(toBit(float64(L.CheckNumber(i)))) }
	push := func(L *lua.LState, v uint32) int { L.Push(lua.LNumber(int32(v))); return 1 }
	fold := func(op func(a, b uint32) uint32) lua.LGFunction {
		return func(L *lua.LState) int {
			v := arg(L, 1)
			for i := 2; i <= L.GetTop(); i++ {
				v = op(v, arg(L, i))
			}
			return push(L, v)
		}
	}
	shift := func(op func(a uint32, n uint) uint32) lua.LGFunction {
		return func(L *lua.LState) int { return push(L, op(arg(L, 1), uint(arg(L, 2)&31))) }
	}
	fns := map[string]lua.LGFunction{
		"tobit":  func(L *lua.LState) int { return push(L, arg(L, 1)) },
		"bnot":   func(L *lua.LState) int { return push(L, ^arg(L, 1)) },
		"band":   fold(func(a, b uint32) uint32 { return a & b }),
		"bor":    fold(func(a, b uint32) uint32 { return a | b }),
		"bxor":   fold(func(a, b uint32) uint32 { return a ^ b }),
		"lshift": shift(func(a uint32, n uint) uint32 { return a << n }),
		"rshift": shift(func(a uint32, n uint) uint32 { return a >> n }),
		"arshift": shift(func(a uint32, n uint) uint32 {
			return uint32(int32(a) >> n)
		}),
		"rol": shift(func(a uint32, n uint) uint32 { return a<<n | a>>(32-n) }),
		"ror": shift(func(a uint32, n uint) uint32 { return a>>n | a<<(32-n) }),
		"bswap": func(L *lua.LState) int {
			a := arg(L, 1)
			return push(L, a>>24|a>>8&0xff00|a<<8&0xff0000|a<<24)
		},
		"tohex": func(L *lua.LState) int {
			a := arg(L, 1)
			n := 8
			if L.GetTop() >= 2 {
				n = int(toBit(float64(L.CheckNumber(2))))
			}
			digits := "0123456789abcdef"
			if n < 0 {
				n, digits = -n, "0123456789ABCDEF"
			}
			n = min(n, 8)
			var buf bytes.Buffer
			for i := n - 1; i >= 0; i-- {
				buf.WriteByte(digits[a>>(4*uint(i))&15])
			}
			L.Push(lua.LString(buf.String()))
			return 1
		},
	}
	for name, fn := range fns {
		t.RawSetString(name, L.NewFunction(fn))
	}
	return t
}

// toBit normalises a number to a signed 32-bit integer as LuaBitOp does:
// rounded to nearest (ties to even), then taken modulo 2^32.
func toBit(f float64) int32 {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0
	}
	r := math.RoundToEven(f)
	m := math.Mod(r, 4294967296)
	if m < 0 {
		m += 4294967296
	}
	return int32(uint32(m))
}
