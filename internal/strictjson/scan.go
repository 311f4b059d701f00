package strictjson

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// errSlowPath sends a document to the decoder walk (checkWithDecoder): the
// scan below gives up on what it does not read itself (a key with an
// escape, a document that does not parse), so every error on such input is
// the decoder's, word for word, as if there were no scan.
var errSlowPath = errors.New("strictjson: needs the decoder walk")

// check is CheckNames for raw already known to be one valid JSON value.
//
// It scans the bytes once, without json.Decoder's Token (an allocation per
// token, a map per object, a path string per key): in `tributary bench
// events` the decoder walk alone takes 3.6 µs of the 5.7 µs an ordered
// event's payload takes to decode, and allocates a sixth of the bytes of
// the dispatch path.
func check(raw []byte, t reflect.Type) error {
	s := scanner{b: raw}
	err := s.value(t)
	if errors.Is(err, errSlowPath) {
		return checkWithDecoder(raw, t)
	}
	return err
}

// typeInfo is what the scan needs of a Go type, worked out once per type.
type typeInfo struct {
	free   bool                    // decodes itself, or not a struct, map, slice or array
	fields map[string]reflect.Type // a struct's JSON names
	names  []string                // the same names, sorted, for the case-folding check
	elem   reflect.Type            // a map's value, a slice's or array's element
	kind   reflect.Kind
}

var typeInfos sync.Map // reflect.Type -> *typeInfo

func infoOf(t reflect.Type) *typeInfo {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil {
		return nil
	}
	if v, ok := typeInfos.Load(t); ok {
		return v.(*typeInfo)
	}
	info := &typeInfo{kind: t.Kind()}
	switch {
	case customDecoder(t):
		info.free = true
	case t.Kind() == reflect.Struct:
		info.fields = fieldNames(t)
		for name := range info.fields {
			info.names = append(info.names, name)
		}
		slices.Sort(info.names)
	case t.Kind() == reflect.Map, t.Kind() == reflect.Slice, t.Kind() == reflect.Array:
		info.elem = t.Elem()
	default:
		info.free = true
	}
	v, _ := typeInfos.LoadOrStore(t, info)
	return v.(*typeInfo)
}

// scanner walks one JSON value in b alongside a Go type. It checks the
// document's shape only as far as it needs to find keys; check's callers
// have the document decoded or validated already.
type scanner struct {
	b    []byte
	i    int
	path []pathPart // where the scan is, rendered only for an error
}

// pathPart is one step of a path: an object's key (a range of b) or an
// array's index.
type pathPart struct {
	start, end int
	index      int // -1 for a key
}

func (s *scanner) pathString() string {
	var sb strings.Builder
	for _, p := range s.path {
		if p.index >= 0 {
			sb.WriteString("[" + strconv.Itoa(p.index) + "]")
			continue
		}
		if sb.Len() > 0 {
			sb.WriteByte('.')
		}
		sb.Write(s.b[p.start:p.end])
	}
	return sb.String()
}

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *scanner) peek() byte {
	s.ws()
	if s.i >= len(s.b) {
		return 0
	}
	return s.b[s.i]
}

func (s *scanner) value(t reflect.Type) error {
	var info *typeInfo
	if t != nil {
		info = infoOf(t)
	}
	switch s.peek() {
	case '{':
		return s.object(info)
	case '[':
		return s.array(info)
	case '"':
		if _, _, ok, _ := s.str(); !ok {
			return errSlowPath
		}
		return nil
	case 0:
		return errSlowPath
	default:
		for s.i < len(s.b) {
			switch s.b[s.i] {
			case ',', ']', '}', ' ', '\t', '\n', '\r':
				return nil
			}
			s.i++
		}
		return nil
	}
}

// str reads a string at s.i and returns the range of its content, whether
// it ended (ok) and whether it holds an escape (a key with one is left to
// the decoder walk, which unescapes it).
func (s *scanner) str() (start, end int, ok, escaped bool) {
	s.i++ // the opening quote
	start = s.i
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case '"':
			end = s.i
			s.i++
			return start, end, true, escaped
		case '\\':
			escaped = true
			s.i += 2
		default:
			s.i++
		}
	}
	return 0, 0, false, escaped
}

func (s *scanner) array(info *typeInfo) error {
	var elem reflect.Type
	if info != nil && !info.free && (info.kind == reflect.Slice || info.kind == reflect.Array) {
		elem = info.elem
	}
	s.i++ // [
	if s.peek() == ']' {
		s.i++
		return nil
	}
	for n := 0; ; n++ {
		s.path = append(s.path, pathPart{index: n})
		if err := s.value(elem); err != nil {
			return err
		}
		s.path = s.path[:len(s.path)-1]
		switch s.peek() {
		case ',':
			s.i++
		case ']':
			s.i++
			return nil
		default:
			return errSlowPath
		}
	}
}

func (s *scanner) object(info *typeInfo) error {
	var fields map[string]reflect.Type
	var names []string
	var elem reflect.Type
	if info != nil && !info.free {
		switch info.kind {
		case reflect.Struct:
			fields, names = info.fields, info.names
		case reflect.Map:
			elem = info.elem
		}
	}
	s.i++ // {
	if s.peek() == '}' {
		s.i++
		return nil
	}
	var small [8]pathPart
	seen := small[:0]
	for {
		if s.peek() != '"' {
			return errSlowPath
		}
		start, end, ok, escaped := s.str()
		if !ok || escaped {
			return errSlowPath
		}
		key := s.b[start:end]
		for _, k := range seen {
			if string(s.b[k.start:k.end]) == string(key) {
				return fmt.Errorf("duplicate key %q%s", key, in(s.pathString()))
			}
		}
		seen = append(seen, pathPart{start: start, end: end, index: -1})
		next := elem
		if fields != nil {
			if ft, exact := fields[string(key)]; exact {
				next = ft
			} else {
				for _, name := range names {
					if strings.EqualFold(name, string(key)) {
						return fmt.Errorf("key %q matches field %q only when case is ignored%s; use the exact name", key, name, inParens(s.pathString()))
					}
				}
				next = nil // unknown: the decoder reports it if it must
			}
		}
		if s.peek() != ':' {
			return errSlowPath
		}
		s.i++
		s.path = append(s.path, pathPart{start: start, end: end, index: -1})
		if err := s.value(next); err != nil {
			return err
		}
		s.path = s.path[:len(s.path)-1]
		switch s.peek() {
		case ',':
			s.i++
		case '}':
			s.i++
			return nil
		default:
			return errSlowPath
		}
	}
}
