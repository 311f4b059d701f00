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

// TestReadableArgs: the dashboard's reading of dispatch args shows each
// event as an object, for a lone dispatch and a batch; old-shape args read
// the same; other kinds and undecodable args come back unchanged.
func TestReadableArgs(t *testing.T) {
	one, err := json.Marshal(dispatchArgs{Consumer: "c", AggregateID: "a-1", Seq: 3, Event: testEvent("e-1")})
	require.NoError(t, err)
	var packed map[string]any
	require.NoError(t, json.Unmarshal(one, &packed))
	require.IsType(t, "", packed["event"], "stored packed")

	readable := ReadableArgs(DispatchKind, one)
	var got struct {
		Consumer string       `json:"consumer"`
		Seq      int64        `json:"seq"`
		Event    outbox.Event `json:"event"`
	}
	require.NoError(t, json.Unmarshal(readable, &got), "%s", readable)
	require.Equal(t, "c", got.Consumer)
	require.EqualValues(t, 3, got.Seq)
	require.Equal(t, "e-1", got.Event.ID)
	require.Contains(t, string(readable), `"payload":{"text":"<x> & \"y\""}`, "payload as stored, unescaped")

	batch, err := json.Marshal(dispatchBatchArgs{Consumer: "c", Events: []outbox.Event{testEvent("e-2"), testEvent("e-3")}})
	require.NoError(t, err)
	var gotBatch struct {
		Events []outbox.Event `json:"events"`
	}
	require.NoError(t, json.Unmarshal(ReadableArgs(DispatchBatchKind, batch), &gotBatch))
	require.Len(t, gotBatch.Events, 2)
	require.Equal(t, "e-3", gotBatch.Events[1].ID)

	oldShape := []byte(`{"consumer":"c","event":{"id":"e-4"}}`)
	require.JSONEq(t, string(oldShape), string(ReadableArgs(DispatchKind, oldShape)))
	for _, tc := range []struct{ kind, args string }{
		{"demo.noop", `{"event":"{\"id\":1}"}`},
		{DispatchKind, `{"consumer":"c","event":"not json"}`},
		{DispatchKind, `not json`},
		{DispatchBatchKind, `{"events":[1]}`},
	} {
		require.Equal(t, tc.args, string(ReadableArgs(tc.kind, []byte(tc.args))), "%s %s", tc.kind, tc.args)
	}
}
