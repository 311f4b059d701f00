package events

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/outbox"
)

func testEvent(id string) outbox.Event {
	return outbox.Event{
		ID: id, EventType: "test.note", EventVersion: 1, EventKind: "domain", AggregateID: "a-1",
		Payload:   json.RawMessage(`{"text":"<x> & \"y\""}`),
		Metadata:  outbox.Metadata{CorrelationID: "corr", Extra: map[string]string{"k": "v"}},
		CreatedAt: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC), SourceService: "svc",
	}
}

// asStored is v's JSON as jsonb gives it back: <, > and & unescaped.
func asStored(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	err := enc.Encode(v)
	return buf.Bytes(), err
}

// The args carry the event as one JSON string, and both that and the shape
// before (the event as an object, jobs inserted by an older version) decode
// to the same args.
func TestDispatchArgsPackedAndOldShape(t *testing.T) {
	args := dispatchArgs{Consumer: "c", AggregateID: "a-1", Seq: 7, Event: testEvent("e1")}
	b, err := json.Marshal(args)
	require.NoError(t, err)
	var doc map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(b, &doc))
	require.Equal(t, byte('"'), doc["event"][0], "event packed as a string: %s", b)
	require.Equal(t, `"c"`, string(doc["consumer"]))
	require.Equal(t, `"a-1"`, string(doc["aggregate_id"]))
	require.Equal(t, `7`, string(doc["seq"]))

	var back dispatchArgs
	require.NoError(t, json.Unmarshal(b, &back))
	require.Equal(t, args, back)

	type oldArgs struct { // the shape before packing
		Consumer    string       `json:"consumer"`
		AggregateID string       `json:"aggregate_id,omitempty"`
		Seq         int64        `json:"seq,omitempty"`
		Event       outbox.Event `json:"event"`
	}
	old, err := asStored(oldArgs{Consumer: "c", AggregateID: "a-1", Seq: 7, Event: testEvent("e1")})
	require.NoError(t, err)
	var fromOld dispatchArgs
	require.NoError(t, json.Unmarshal(old, &fromOld))
	require.Equal(t, args, fromOld)

	batch := dispatchBatchArgs{Consumer: "c", Events: []outbox.Event{testEvent("e1"), testEvent("e2")}}
	b, err = json.Marshal(batch)
	require.NoError(t, err)
	var backBatch dispatchBatchArgs
	require.NoError(t, json.Unmarshal(b, &backBatch))
	require.Equal(t, batch, backBatch)
	old, err = asStored(struct {
		Consumer string         `json:"consumer"`
		Events   []outbox.Event `json:"events"`
	}{"c", batch.Events})
	require.NoError(t, err)
	var fromOldBatch dispatchBatchArgs
	require.NoError(t, json.Unmarshal(old, &fromOldBatch))
	require.Equal(t, batch, fromOldBatch)

	var bad dispatchArgs
	require.ErrorContains(t, json.Unmarshal([]byte(`{"consumer":"c","event":"{not json"}`), &bad), "error decoding an event")
}
