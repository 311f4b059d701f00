package events

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/tributary-run/tributary/outbox"
)

// A dispatch job's args carry the event packed: its JSON as one string
// value, not as a nested object. River indexes args with a GIN index
// (jsonb_ops), which makes an entry for every key and every scalar value
// of the document; an event as an object costs a few dozen entries (its
// fields, its metadata, every key and value of its payload), as one string
// a single one (long strings are hashed). Inserting the dispatch jobs is
// the largest part of forwarding an ordered event, and that index most of
// the insert (docs/decisions/0007-packed-dispatch-args.md). Decoding
// accepts both shapes: jobs inserted before the
// change (events as objects) still run.

// dispatchArgsJSON is dispatchArgs as stored.
type dispatchArgsJSON struct {
	Consumer    string          `json:"consumer"`
	AggregateID string          `json:"aggregate_id,omitempty"`
	Seq         int64           `json:"seq,omitempty"`
	Event       json.RawMessage `json:"event"`
}

// MarshalJSON writes the args with the event packed.
func (a dispatchArgs) MarshalJSON() ([]byte, error) {
	return appendDispatchArgs(nil, &a)
}

// marshalReflect is MarshalJSON through encoding/json's reflection: what
// appendDispatchArgs writes, and its fallback.
func (a dispatchArgs) marshalReflect() ([]byte, error) {
	ev, err := packEvent(&a.Event)
	if err != nil {
		return nil, err
	}
	return json.Marshal(dispatchArgsJSON{Consumer: a.Consumer, AggregateID: a.AggregateID, Seq: a.Seq, Event: ev})
}

// UnmarshalJSON reads the args with the event packed or as an object.
func (a *dispatchArgs) UnmarshalJSON(b []byte) error {
	return decodeDispatchArgs(b, a)
}

// unmarshalReflect is UnmarshalJSON through encoding/json's reflection:
// decodeDispatchArgs's fallback.
func (a *dispatchArgs) unmarshalReflect(b []byte) error {
	var w dispatchArgsJSON
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*a = dispatchArgs{Consumer: w.Consumer, AggregateID: w.AggregateID, Seq: w.Seq}
	return unpackEvent(w.Event, &a.Event)
}

// dispatchBatchArgsJSON is dispatchBatchArgs as stored.
type dispatchBatchArgsJSON struct {
	Consumer string            `json:"consumer"`
	Events   []json.RawMessage `json:"events"`
}

// MarshalJSON writes the args with each event packed.
func (a dispatchBatchArgs) MarshalJSON() ([]byte, error) {
	return appendDispatchBatchArgs(nil, &a)
}

// marshalReflect is MarshalJSON through encoding/json's reflection: what
// appendDispatchBatchArgs writes, and its fallback.
func (a dispatchBatchArgs) marshalReflect() ([]byte, error) {
	w := dispatchBatchArgsJSON{Consumer: a.Consumer, Events: make([]json.RawMessage, len(a.Events))}
	for i := range a.Events {
		ev, err := packEvent(&a.Events[i])
		if err != nil {
			return nil, err
		}
		w.Events[i] = ev
	}
	return json.Marshal(w)
}

// UnmarshalJSON reads the args with each event packed or as an object.
func (a *dispatchBatchArgs) UnmarshalJSON(b []byte) error {
	var w dispatchBatchArgsJSON
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*a = dispatchBatchArgs{Consumer: w.Consumer, Events: make([]outbox.Event, len(w.Events))}
	for i, raw := range w.Events {
		if err := unpackEvent(raw, &a.Events[i]); err != nil {
			return err
		}
	}
	return nil
}

// packEvent is ev's JSON as a JSON string.
func packEvent(ev *outbox.Event) (json.RawMessage, error) {
	b, err := marshalUnescaped(ev)
	if err != nil {
		return nil, fmt.Errorf("error encoding event %s: %w", ev.ID, err)
	}
	return json.Marshal(string(b))
}

// marshalUnescaped is v's JSON keeping <, > and & as they are (json.Marshal
// would write \u003c and so on): as an object in jsonb an event was stored
// unescaped, and a handler gets the payload's bytes as stored.
func marshalUnescaped(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// eventJSON is the JSON of a stored event: a packed one (a JSON string
// holding the event's JSON) unquoted, one stored as an object (the shape
// before packing) as it is.
func eventJSON(raw json.RawMessage) (json.RawMessage, error) {
	if len(raw) == 0 || raw[0] != '"' {
		return raw, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, fmt.Errorf("error decoding a packed event: %w", err)
	}
	return json.RawMessage(s), nil
}

// unpackEvent decodes a packed event or one stored as an object.
func unpackEvent(raw json.RawMessage, ev *outbox.Event) error {
	if len(raw) == 0 {
		return nil // no event: decoding leaves it zero, as encoding/json would
	}
	raw, err := eventJSON(raw)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(raw, ev); err != nil {
		return fmt.Errorf("error decoding an event: %w", err)
	}
	return nil
}

// ReadableArgs returns a dispatch job's args with its event (a batch's
// events) as JSON objects, the shape an operator reads and the one jobs had
// before packing; the dashboard's job page shows them so. Args of other
// kinds, and args that do not decode, come back unchanged.
func ReadableArgs(kind string, args []byte) []byte {
	var v any
	switch kind {
	case DispatchKind:
		var w dispatchArgsJSON
		if json.Unmarshal(args, &w) != nil || !unpackRaw(&w.Event) {
			return args
		}
		v = w
	case DispatchBatchKind:
		var w dispatchBatchArgsJSON
		if json.Unmarshal(args, &w) != nil {
			return args
		}
		for i := range w.Events {
			if !unpackRaw(&w.Events[i]) {
				return args
			}
		}
		v = w
	default:
		return args
	}
	b, err := marshalUnescaped(v)
	if err != nil {
		return args
	}
	return b
}

// unpackRaw replaces a stored event by its JSON (eventJSON) and reports
// whether that is a JSON object.
func unpackRaw(raw *json.RawMessage) bool {
	ev, err := eventJSON(*raw)
	if err != nil || len(ev) == 0 || ev[0] != '{' || !json.Valid(ev) {
		return false
	}
	*raw = ev
	return true
}
