// Package strictjson checks that a JSON document has one reading: no object
// repeats a key, and no key matches a struct field of the target type only
// when case is ignored. encoding/json accepts both (it keeps the last of
// repeated keys, and folds case when it finds no exact match); other
// decoders keep the first key, refuse it, or match case exactly, so a
// producer and a consumer could read different values from the same bytes.
//
// Used by the events package's payload decoding and the AMQP bridge's
// JSONHandler.
package strictjson

import (
	"bytes"
	"encoding"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"
)

// CheckNames walks raw (one valid JSON value) alongside the Go type t it is
// decoded into and reports the first repeated key or case-only field match,
// with its path ("items[1].sku"). Keys that match no field are not its
// concern (the decoder's DisallowUnknownFields is). Types with their own
// UnmarshalJSON or UnmarshalText decide their own names; only repeated keys
// are checked inside them, as inside maps, interfaces and json.RawMessage.
func CheckNames(raw []byte, t reflect.Type) error {
	if !json.Valid(raw) {
		// The decoder walk reports the syntax error, in json.Decoder's words.
		return checkWithDecoder(raw, t)
	}
	return check(raw, t)
}

// CheckNamesDecoded is CheckNames for raw that was decoded without error
// already (so it is valid JSON): it skips the validity check.
func CheckNamesDecoded(raw []byte, t reflect.Type) error { return check(raw, t) }

// checkWithDecoder is CheckNames walking json.Decoder's tokens: the
// reference the scan (check) agrees with, and what it falls back to for
// input it does not read itself.
func checkWithDecoder(raw []byte, t reflect.Type) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	w := walker{dec: dec}
	return w.value(t, "")
}

type walker struct {
	dec *json.Decoder
}

var (
	unmarshalerType     = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// customDecoder reports whether t decodes itself, so its JSON names need
// not be its fields.
func customDecoder(t reflect.Type) bool {
	if t == nil {
		return false
	}
	return t.Implements(unmarshalerType) || reflect.PointerTo(t).Implements(unmarshalerType) ||
		t.Implements(textUnmarshalerType) || reflect.PointerTo(t).Implements(textUnmarshalerType)
}

// value checks the next JSON value, decoded into t (nil: unknown or free).
func (w *walker) value(t reflect.Type, path string) error {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if customDecoder(t) {
		t = nil
	}
	tok, err := w.dec.Token()
	if err != nil {
		return err
	}
	delim, ok := tok.(json.Delim)
	if !ok {
		return nil
	}
	switch delim {
	case '[':
		var elem reflect.Type
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			elem = t.Elem()
		}
		for i := 0; w.dec.More(); i++ {
			if err := w.value(elem, path+"["+strconv.Itoa(i)+"]"); err != nil {
				return err
			}
		}
	case '{':
		var fields map[string]reflect.Type
		var elem reflect.Type
		switch {
		case t != nil && t.Kind() == reflect.Struct:
			fields = fieldNames(t)
		case t != nil && t.Kind() == reflect.Map:
			elem = t.Elem()
		}
		seen := map[string]struct{}{}
		for w.dec.More() {
			tok, err := w.dec.Token()
			if err != nil {
				return err
			}
			key, _ := tok.(string)
			if _, dup := seen[key]; dup {
				return fmt.Errorf("duplicate key %q%s", key, in(path))
			}
			seen[key] = struct{}{}
			next := elem
			if fields != nil {
				if ft, exact := fields[key]; exact {
					next = ft
				} else {
					for name := range fields {
						if strings.EqualFold(name, key) {
							return fmt.Errorf("key %q matches field %q only when case is ignored%s; use the exact name", key, name, inParens(path))
						}
					}
					next = nil // unknown: the decoder reports it if it must
				}
			}
			if err := w.value(next, join(path, key)); err != nil {
				return err
			}
		}
	}
	_, err = w.dec.Token() // the closing delimiter
	return err
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func in(path string) string {
	if path == "" {
		return ""
	}
	return " in " + path
}

func inParens(path string) string {
	if path == "" {
		return ""
	}
	return " (in " + path + ")"
}

// fieldNames returns the JSON names of t's fields as encoding/json sees
// them, with the type each decodes into: the tag's name or the Go name,
// fields tagged "-" and unexported fields left out, and the fields of
// embedded structs without a tag name promoted, shallower ones first.
// Where encoding/json would drop an ambiguous promoted name this keeps one
// of them; such a name matches no field there, and the decoder's
// unknown-field check reports it.
func fieldNames(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	level := []reflect.Type{t}
	seen := map[reflect.Type]bool{t: true}
	for len(level) > 0 {
		var next []reflect.Type
		named := map[string]reflect.Type{}
		for _, st := range level {
			for i := range st.NumField() {
				f := st.Field(i)
				tag := f.Tag.Get("json")
				if tag == "-" {
					continue
				}
				name, _, _ := strings.Cut(tag, ",")
				if f.Anonymous && name == "" {
					et := f.Type
					if et.Kind() == reflect.Pointer {
						et = et.Elem()
					}
					if et.Kind() == reflect.Struct {
						if !seen[et] {
							seen[et] = true
							next = append(next, et)
						}
						continue
					}
				}
				if !f.IsExported() {
					continue
				}
				if name == "" {
					name = f.Name
				}
				if _, shallower := out[name]; !shallower {
					if _, sibling := named[name]; !sibling {
						named[name] = f.Type
					}
				}
			}
		}
		for name, ft := range named {
			out[name] = ft
		}
		level = next
	}
	return out
}
