package events

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/tributary-run/tributary/outbox"
)

// The forwarder encodes every event it hands to a consumer's lane (a lane
// event's args, a dispatch job's args), and encoding/json spent most of
// that in reflection and in validating the same bytes twice: once
// compacting the payload into the event, once more compacting the packed
// event into the args. appendDispatchArgs writes the same bytes directly
// (TestAppendDispatchArgsMatchesEncodingJSON compares the two on events
// with every kind of character), falling back to encoding/json for what it
// does not cover (a time outside years 0-9999, which encoding/json
// rejects).

// appendDispatchArgs appends a's JSON, byte for byte what json.Marshal(a)
// writes.
func appendDispatchArgs(dst []byte, a *dispatchArgs) ([]byte, error) {
	if y := a.Event.CreatedAt.Year(); y < 0 || y > 9999 {
		b, err := a.marshalReflect()
		return append(dst, b...), err
	}
	ev, err := appendEventJSON(nil, &a.Event)
	if err != nil {
		return dst, err
	}
	dst = appendArgsHead(dst, a)
	dst = appendJSONString(dst, ev, true)
	return append(dst, '}'), nil
}

// appendArgsHead appends a's args up to the event's value: the keys before
// it, as encoding/json writes them, and `"event":`.
func appendArgsHead(dst []byte, a *dispatchArgs) []byte {
	dst = append(dst, `{"consumer":`...)
	dst = appendJSONString(dst, a.Consumer, true)
	if a.AggregateID != "" {
		dst = append(dst, `,"aggregate_id":`...)
		dst = appendJSONString(dst, a.AggregateID, true)
	}
	if a.Seq != 0 {
		dst = append(dst, `,"seq":`...)
		dst = strconv.AppendInt(dst, a.Seq, 10)
	}
	return append(dst, `,"event":`...)
}

// appendLaneEventArgs appends a's JSON as a lane event keeps it: the event
// as an object, not packed into a string. Packing is for River's GIN index
// on args, which would take an entry for every key and value of an event
// object; a lane event's args are text that no index covers, and writing
// the event out as a string escaped every quote of it, which the chain
// then unescaped into a copy (without both, this process's CPU an ordered
// event went 43.9 -> 40.0 µs, medians of an A/B). decodeDispatchArgs reads both
// shapes; where a lane event becomes a River job the event is packed
// again (riverjob's promotion in SQL, packedDispatchArgs in Go).
func appendLaneEventArgs(dst []byte, a *dispatchArgs) ([]byte, error) {
	if y := a.Event.CreatedAt.Year(); y < 0 || y > 9999 {
		b, err := a.marshalReflect()
		return append(dst, b...), err
	}
	dst, err := appendEventJSON(appendArgsHead(dst, a), &a.Event)
	if err != nil {
		return dst, err
	}
	return append(dst, '}'), nil
}

// packedDispatchArgs is a lane event's args as a dispatch job's (the event
// packed), for the rare paths that make a River job of a lane event in Go
// (a chained event that failed, a lane blocked by one).
func packedDispatchArgs(args []byte) ([]byte, error) {
	var a dispatchArgs
	if err := decodeDispatchArgs(args, &a); err != nil {
		return nil, err
	}
	return appendDispatchArgs(nil, &a)
}

// appendDispatchBatchArgs appends a's JSON, byte for byte what
// json.Marshal(a) writes: the batched dispatch job's args, which the bus
// writes for every batch of events without an aggregate (the inbound
// bridge's events, unordered ones from the outbox).
func appendDispatchBatchArgs(dst []byte, a *dispatchBatchArgs) ([]byte, error) {
	for i := range a.Events {
		if y := a.Events[i].CreatedAt.Year(); y < 0 || y > 9999 {
			b, err := a.marshalReflect()
			return append(dst, b...), err
		}
	}
	dst = append(dst, `{"consumer":`...)
	dst = appendJSONString(dst, a.Consumer, true)
	dst = append(dst, `,"events":[`...)
	var ev []byte
	for i := range a.Events {
		var err error
		if ev, err = appendEventJSON(ev[:0], &a.Events[i]); err != nil {
			return dst, fmt.Errorf("error encoding event %s: %w", a.Events[i].ID, err)
		}
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendJSONString(dst, ev, true)
	}
	return append(dst, "]}"...), nil
}

// appendEventJSON appends ev's JSON as marshalUnescaped writes it: fields
// in declaration order, omitempty ones left out when empty, the payload
// compacted, <, > and & as they are.
func appendEventJSON(dst []byte, ev *outbox.Event) ([]byte, error) {
	dst = append(dst, `{"id":`...)
	dst = appendJSONString(dst, ev.ID, false)
	dst = append(dst, `,"event_type":`...)
	dst = appendJSONString(dst, ev.EventType, false)
	dst = append(dst, `,"event_version":`...)
	dst = strconv.AppendInt(dst, int64(ev.EventVersion), 10)
	dst = append(dst, `,"event_kind":`...)
	dst = appendJSONString(dst, ev.EventKind, false)
	if ev.AggregateID != "" {
		dst = append(dst, `,"aggregate_id":`...)
		dst = appendJSONString(dst, ev.AggregateID, false)
	}
	dst = append(dst, `,"payload":`...)
	if len(ev.Payload) == 0 {
		dst = append(dst, "null"...)
	} else {
		buf := bytes.NewBuffer(dst)
		if err := json.Compact(buf, ev.Payload); err != nil {
			return dst, &json.MarshalerError{Type: reflect.TypeFor[json.RawMessage](), Err: err}
		}
		dst = buf.Bytes()
	}
	dst = append(dst, `,"metadata":`...)
	dst = appendMetadataJSON(dst, &ev.Metadata)
	if ev.SourceService != "" {
		dst = append(dst, `,"source_service":`...)
		dst = appendJSONString(dst, ev.SourceService, false)
	}
	dst = append(dst, `,"created_at":"`...)
	dst = ev.CreatedAt.AppendFormat(dst, time.RFC3339Nano)
	return append(dst, `"}`...), nil
}

// appendMetadataJSON appends m's JSON as encoding/json writes it (map keys
// sorted).
func appendMetadataJSON(dst []byte, m *outbox.Metadata) []byte {
	dst = append(dst, '{')
	sep := false
	field := func(name, v string) {
		if v == "" {
			return
		}
		if sep {
			dst = append(dst, ',')
		}
		sep = true
		dst = append(dst, '"')
		dst = append(dst, name...)
		dst = append(dst, `":`...)
		dst = appendJSONString(dst, v, false)
	}
	field("correlation_id", m.CorrelationID)
	field("causation_id", m.CausationID)
	field("actor", m.Actor)
	if len(m.Extra) > 0 {
		if sep {
			dst = append(dst, ',')
		}
		sep = true
		dst = append(dst, `"extra":{`...)
		keys := make([]string, 0, len(m.Extra))
		for k := range m.Extra {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for i, k := range keys {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendJSONString(dst, k, false)
			dst = append(dst, ':')
			dst = appendJSONString(dst, m.Extra[k], false)
		}
		dst = append(dst, '}')
	}
	field("traceparent", m.TraceParent)
	field("tracestate", m.TraceState)
	return append(dst, '}')
}

// appendJSONString appends s as a JSON string the way encoding/json
// writes one: ", \ and control characters escaped (\b \f \n \r \t by
// name, the others as \u00XX), invalid UTF-8 as \ufffd, U+2028 and U+2029
// as \u2028 and \u2029, and with html <, > and & as \u003c, \u003e and
// \u0026.
func appendJSONString[S string | []byte](dst []byte, s S, html bool) []byte {
	const hexDigits = "0123456789abcdef"
	dst = append(dst, '"')
	done := 0 // s[done:i] is still to be copied
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			var esc string
			switch {
			case c == '"':
				esc = `\"`
			case c == '\\':
				esc = `\\`
			case c == '\b':
				esc = `\b`
			case c == '\f':
				esc = `\f`
			case c == '\n':
				esc = `\n`
			case c == '\r':
				esc = `\r`
			case c == '\t':
				esc = `\t`
			case c < 0x20 || (html && (c == '<' || c == '>' || c == '&')):
				dst = append(dst, s[done:i]...)
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
				i++
				done = i
				continue
			default:
				i++
				continue
			}
			dst = append(dst, s[done:i]...)
			dst = append(dst, esc...)
			i++
			done = i
			continue
		}
		r, size := utf8.DecodeRuneInString(string(s[i:min(len(s), i+utf8.UTFMax)]))
		switch {
		case r == utf8.RuneError && size == 1:
			dst = append(dst, s[done:i]...)
			dst = append(dst, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			dst = append(dst, s[done:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
		default:
			i += size
			continue
		}
		i += size
		done = i
	}
	dst = append(dst, s[done:]...)
	return append(dst, '"')
}
