package events

import (
	"encoding/json"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/tributary-run/tributary/outbox"
)

// A chain decodes the args of every lane event it runs, and River those of
// every dispatch job, as Postgres prints them from jsonb. decodeDispatchArgs
// reads args with a packed event without reflection and hands everything
// else to encoding/json (the old object shape, keys in another case or
// twice, unknown keys, nulls, invalid UTF-8, JSON it does not accept), so
// the result is always what json.Unmarshal gives
// (TestDecodeDispatchArgsMatchesEncodingJSON, and
// TestDecodeDispatchArgsFromJSONB on args printed by Postgres).

// decodeDispatchArgs decodes b into a as json.Unmarshal(b, a) does.
func decodeDispatchArgs(b []byte, a *dispatchArgs) error {
	var fast dispatchArgs
	if decodeDispatchArgsFast(b, &fast) {
		*a = fast
		return nil
	}
	return a.unmarshalReflect(b)
}

// decodeDispatchArgsFast decodes b when it is an object of the args' keys
// (each once, in any order, with or without whitespace: Postgres's jsonb
// prints keys shortest first, `{"seq": 2, "event": "...", ...}`) whose
// event is packed, and reports whether it did; a is set only then.
//
// A lane event's args carry the event as an object, not packed
// (appendLaneEventArgs): it is read in place, without unescaping a copy.
func decodeDispatchArgsFast(b []byte, a *dispatchArgs) bool {
	p := jsonReader{b: b}
	var ev []byte
	packed := false
	seen, ok := p.fields(func(key []byte) (bit uint16, ok bool) {
		switch string(key) {
		case "consumer":
			a.Consumer, ok = p.str()
			return 1, ok
		case "aggregate_id":
			a.AggregateID, ok = p.str()
			return 2, ok
		case "seq":
			a.Seq, ok = p.int()
			return 4, ok
		case "event":
			if p.i < len(p.b) && p.b[p.i] == '{' {
				return 8, p.event(&a.Event)
			}
			packed = true
			ev, ok = p.strBytes()
			return 8, ok
		}
		return 0, false
	})
	p.ws()
	return ok && p.i == len(p.b) && seen&8 != 0 && (!packed || decodeEventFast(ev, &a.Event))
}

// decodeEventFast decodes an event's JSON (an object of its keys, each
// once), and reports whether it did.
func decodeEventFast(b []byte, ev *outbox.Event) bool {
	p := jsonReader{b: b}
	ok := p.event(ev)
	p.ws()
	return ok && p.i == len(p.b)
}

// event reads an event's object at p (its keys each once) into ev.
func (p *jsonReader) event(ev *outbox.Event) bool {
	_, ok := p.fields(func(key []byte) (bit uint16, ok bool) {
		switch string(key) {
		case "id":
			ev.ID, ok = p.str()
			return 1, ok
		case "event_type":
			ev.EventType, ok = p.str()
			return 2, ok
		case "event_version":
			n, ok := p.int()
			ev.EventVersion = int(n)
			return 4, ok && int64(ev.EventVersion) == n
		case "event_kind":
			ev.EventKind, ok = p.str()
			return 8, ok
		case "aggregate_id":
			ev.AggregateID, ok = p.str()
			return 16, ok
		case "payload":
			var raw []byte
			raw, ok = p.value()
			ev.Payload = json.RawMessage(raw)
			return 32, ok
		case "metadata":
			return 64, p.metadata(&ev.Metadata)
		case "source_service":
			ev.SourceService, ok = p.str()
			return 128, ok
		case "created_at":
			start := p.i
			if _, ok = p.strBytes(); ok {
				ok = ev.CreatedAt.UnmarshalJSON(p.b[start:p.i]) == nil
			}
			return 256, ok
		}
		return 0, false
	})
	return ok
}

// jsonReader reads JSON tokens from b at i; each method reports false,
// and may have moved i, when b does not have the token there.
type jsonReader struct {
	b []byte
	i int
}

// ws skips JSON whitespace.
func (p *jsonReader) ws() {
	for p.i < len(p.b) && isJSONSpace(p.b[p.i]) {
		p.i++
	}
}

// object reads an object, calling field with each key (unquoted) and p
// at the key's value, which field reads; false when field does, or for
// anything but an object of string keys.
func (p *jsonReader) object(field func(key []byte) bool) bool {
	p.ws()
	if !p.lit(`{`) {
		return false
	}
	p.ws()
	if p.lit(`}`) {
		return true
	}
	for {
		p.ws()
		key, ok := p.strBytes()
		if !ok {
			return false
		}
		p.ws()
		if !p.lit(`:`) {
			return false
		}
		p.ws()
		if !field(key) {
			return false
		}
		p.ws()
		if p.lit(`}`) {
			return true
		}
		if !p.lit(`,`) {
			return false
		}
	}
}

// fields reads an object of known keys: field reads the value of key and
// returns the key's bit, or false for a key it does not know or a value it
// cannot read. A key seen twice is false too. seen has the bits of the
// keys read.
func (p *jsonReader) fields(field func(key []byte) (bit uint16, ok bool)) (seen uint16, ok bool) {
	ok = p.object(func(key []byte) bool {
		bit, ok := field(key)
		if !ok || seen&bit != 0 {
			return false
		}
		seen |= bit
		return true
	})
	return seen, ok
}

// lit reads the bytes s.
func (p *jsonReader) lit(s string) bool {
	if len(p.b)-p.i < len(s) || string(p.b[p.i:p.i+len(s)]) != s {
		return false
	}
	p.i += len(s)
	return true
}

// int reads an integer as JSON writes one (no fraction, no exponent, no
// leading zero) that fits an int64.
func (p *jsonReader) int() (int64, bool) {
	start := p.i
	if p.i < len(p.b) && p.b[p.i] == '-' {
		p.i++
	}
	digits := p.i
	for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
		p.i++
	}
	if p.i == digits || (p.b[digits] == '0' && p.i-digits > 1) {
		return 0, false
	}
	if p.i < len(p.b) && (p.b[p.i] == '.' || p.b[p.i] == 'e' || p.b[p.i] == 'E') {
		return 0, false
	}
	n, err := strconv.ParseInt(string(p.b[start:p.i]), 10, 64)
	return n, err == nil
}

// str reads a JSON string of valid UTF-8 and returns it unquoted.
func (p *jsonReader) str() (string, bool) {
	b, ok := p.strBytes()
	return string(b), ok
}

// strBytes is str's bytes: a part of p.b when the string has no escapes.
func (p *jsonReader) strBytes() ([]byte, bool) {
	if p.i >= len(p.b) || p.b[p.i] != '"' {
		return nil, false
	}
	p.i++
	start := p.i
	// Most strings have no escape: they are their bytes.
	for p.i < len(p.b) {
		c := p.b[p.i]
		if c == '"' {
			s := p.b[start:p.i]
			p.i++
			return s, utf8.Valid(s)
		}
		if c == '\\' || c < 0x20 {
			break
		}
		p.i++
	}
	out := make([]byte, 0, p.i-start+64)
	out = append(out, p.b[start:p.i]...)
	for p.i < len(p.b) {
		c := p.b[p.i]
		switch {
		case c == '"':
			p.i++
			return out, utf8.Valid(out)
		case c < 0x20:
			return nil, false
		case c != '\\':
			out = append(out, c)
			p.i++
			continue
		}
		if p.i+1 >= len(p.b) {
			return nil, false
		}
		e := p.b[p.i+1]
		p.i += 2
		switch e {
		case '"', '\\', '/':
			out = append(out, e)
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r, ok := p.hex4()
			if !ok {
				return nil, false
			}
			if utf16.IsSurrogate(r) {
				// Half a pair on its own is U+FFFD for encoding/json too,
				// but the cases are many: leave them to it.
				if !p.lit(`\u`) {
					return nil, false
				}
				r2, ok := p.hex4()
				if !ok {
					return nil, false
				}
				if r = utf16.DecodeRune(r, r2); r == utf8.RuneError {
					return nil, false
				}
			}
			out = utf8.AppendRune(out, r)
		default:
			return nil, false
		}
	}
	return nil, false
}

// hex4 reads the four hex digits of a \u escape.
func (p *jsonReader) hex4() (rune, bool) {
	if len(p.b)-p.i < 4 {
		return 0, false
	}
	var r rune
	for _, c := range p.b[p.i : p.i+4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	p.i += 4
	return r, true
}

// value reads one valid JSON value (p at its first byte) and returns a copy
// of its bytes without the whitespace after it, as json.RawMessage's
// decoding keeps them.
func (p *jsonReader) value() ([]byte, bool) {
	start, depth := p.i, 0
	for p.i < len(p.b) {
		switch c := p.b[p.i]; c {
		case '"':
			// Skip the string: to its closing quote, over escapes.
			p.i++
			for p.i < len(p.b) && p.b[p.i] != '"' {
				if p.b[p.i] == '\\' {
					p.i++
				}
				p.i++
			}
			p.i++
		case '{', '[':
			depth++
			p.i++
		case '}', ']':
			if depth == 0 {
				return p.valueEnd(start)
			}
			depth--
			p.i++
		case ',':
			if depth == 0 {
				return p.valueEnd(start)
			}
			p.i++
		default:
			p.i++
		}
	}
	return p.valueEnd(start)
}

func (p *jsonReader) valueEnd(start int) ([]byte, bool) {
	if p.i > len(p.b) || p.i == start {
		return nil, false
	}
	v := p.b[start:p.i]
	for len(v) > 0 && isJSONSpace(v[len(v)-1]) {
		v = v[:len(v)-1]
	}
	if len(v) == 0 || !json.Valid(v) {
		return nil, false
	}
	return append([]byte(nil), v...), true
}

// metadata reads outbox.Metadata's object (its keys each once, extra an
// object of strings).
func (p *jsonReader) metadata(m *outbox.Metadata) bool {
	_, ok := p.fields(func(key []byte) (bit uint16, ok bool) {
		switch string(key) {
		case "correlation_id":
			m.CorrelationID, ok = p.str()
			return 1, ok
		case "causation_id":
			m.CausationID, ok = p.str()
			return 2, ok
		case "actor":
			m.Actor, ok = p.str()
			return 4, ok
		case "traceparent":
			m.TraceParent, ok = p.str()
			return 8, ok
		case "tracestate":
			m.TraceState, ok = p.str()
			return 16, ok
		case "extra":
			m.Extra = map[string]string{}
			return 32, p.object(func(k []byte) bool {
				if _, dup := m.Extra[string(k)]; dup {
					return false
				}
				v, ok := p.str()
				m.Extra[string(k)] = v
				return ok
			})
		}
		return 0, false
	})
	return ok
}

func isJSONSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }
