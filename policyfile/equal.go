package policyfile

import "reflect"

// Equal reports whether a and b say the same: every field equal, as
// reflect.DeepEqual compares them, but the derived ones (Config.File,
// Config.Pos and every Pos field), which only say where things were read.
// Parse(Marshal(c)) is Equal to c.
func Equal(a, b *Config) bool { return equal(reflect.ValueOf(a), reflect.ValueOf(b)) }

var (
	posType    = reflect.TypeFor[Pos]()
	configType = reflect.TypeFor[Config]()
)

func equal(a, b reflect.Value) bool {
	if a.Type() != b.Type() {
		return false
	}
	switch a.Kind() {
	case reflect.Pointer:
		if a.IsNil() || b.IsNil() {
			return a.IsNil() == b.IsNil()
		}
		return equal(a.Elem(), b.Elem())
	case reflect.Struct:
		for i := range a.NumField() {
			f := a.Type().Field(i)
			if f.Type == posType || a.Type() == configType && (f.Name == "File" || f.Name == "Pos") {
				continue
			}
			if !equal(a.Field(i), b.Field(i)) {
				return false
			}
		}
		return true
	case reflect.Slice:
		if a.IsNil() != b.IsNil() || a.Len() != b.Len() {
			return false
		}
		for i := range a.Len() {
			if !equal(a.Index(i), b.Index(i)) {
				return false
			}
		}
		return true
	case reflect.Map:
		if a.IsNil() != b.IsNil() || a.Len() != b.Len() {
			return false
		}
		for it := a.MapRange(); it.Next(); {
			bv := b.MapIndex(it.Key())
			if !bv.IsValid() || !equal(it.Value(), bv) {
				return false
			}
		}
		return true
	default:
		return a.Equal(b)
	}
}
