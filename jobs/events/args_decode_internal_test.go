package events

import (
	"bytes"
	"context"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/outbox"
)

func randomArgs(r *rand.Rand) dispatchArgs {
	zones := []*time.Location{time.UTC, time.FixedZone("", -5*3600-30*60), time.FixedZone("", 14*3600)}
	ev := outbox.Event{ID: randomString(r), EventType: randomString(r), EventVersion: r.IntN(2000) - 1000,
		EventKind: randomString(r), SourceService: randomString(r),
		CreatedAt: time.Date(1+r.IntN(9998), time.Month(1+r.IntN(12)), 1+r.IntN(28), r.IntN(24), r.IntN(60), r.IntN(60),
			[]int{0, 1, 120000000, r.IntN(1e9)}[r.IntN(4)], zones[r.IntN(len(zones))]),
		Metadata: outbox.Metadata{CorrelationID: randomString(r), TraceParent: randomString(r)}}
	if r.IntN(2) == 0 {
		ev.AggregateID, ev.Metadata.Actor, ev.Metadata.CausationID, ev.Metadata.TraceState = randomString(r), randomString(r), randomString(r), randomString(r)
	}
	if r.IntN(4) > 0 {
		ev.Payload = json.RawMessage(randomPayload(r, 0))
	}
	if n := r.IntN(4); n > 0 {
		ev.Metadata.Extra = map[string]string{}
		for ; n > 0; n-- {
			ev.Metadata.Extra[randomString(r)] = randomString(r)
		}
	}
	a := dispatchArgs{Consumer: randomString(r), Event: ev}
	if r.IntN(2) == 0 {
		a.AggregateID, a.Seq = randomString(r), r.Int64N(1e12)-1e6
	}
	return a
}

// decodeBoth decodes b both ways and requires the same outcome.
func decodeBoth(t *testing.T, b []byte) (dispatchArgs, error) {
	t.Helper()
	var fast, slow dispatchArgs
	errFast, errSlow := decodeDispatchArgs(b, &fast), slow.unmarshalReflect(b)
	require.Equal(t, errSlow == nil, errFast == nil, "%q: encoding/json: %v, decodeDispatchArgs: %v", b, errSlow, errFast)
	if errSlow == nil {
		require.Equal(t, slow, fast, "%q", b)
	}
	return fast, errFast
}

// TestDecodeDispatchArgsMatchesEncodingJSON: the args appendDispatchArgs
// writes decode on the fast path to what encoding/json decodes, and any
// other input (mutated args, other shapes) decodes, or fails, as with
// encoding/json.
func TestDecodeDispatchArgsMatchesEncodingJSON(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(3, 4))
	const n = 3000
	fastOnes, laneFast := 0, 0
	for i := 0; i < n; i++ {
		a := randomArgs(r)
		b, err := appendDispatchArgs(nil, &a)
		require.NoError(t, err)
		var fast dispatchArgs
		if decodeDispatchArgsFast(b, &fast) {
			fastOnes++
		}
		_, err = decodeBoth(t, b)
		require.NoError(t, err)

		// The old shape (the event as an object) and mutations.
		old, err := json.Marshal(dispatchArgsJSON{Consumer: a.Consumer, Seq: a.Seq, Event: mustMarshalUnescaped(t, a.Event)})
		require.NoError(t, err)
		_, err = decodeBoth(t, old)
		require.NoError(t, err)
		for m := 0; m < 5; m++ {
			decodeBoth(t, mutate(r, b))
		}

		// A lane event's args (the event as an object) decode on the fast
		// path to the same, and pack back into the dispatch job's bytes.
		lane, err := appendLaneEventArgs(nil, &a)
		require.NoError(t, err)
		var fromLane dispatchArgs
		if decodeDispatchArgsFast(lane, &fromLane) {
			laneFast++
		}
		got, err := decodeBoth(t, lane)
		require.NoError(t, err)
		want, err := decodeBoth(t, b)
		require.NoError(t, err)
		require.Equal(t, want, got, "%q", lane)
		packed, err := packedDispatchArgs(lane)
		require.NoError(t, err)
		repacked, err := decodeBoth(t, packed)
		require.NoError(t, err)
		require.Equal(t, want, repacked, "packed again: %q", packed)
		if utf8.Valid(b) && !bytes.Contains(b, []byte("ufffd")) {
			// Byte for byte, where no invalid UTF-8 became U+FFFD on the way.
			require.Equal(t, string(b), string(packed))
		}
		for m := 0; m < 3; m++ {
			decodeBoth(t, mutate(r, lane))
		}
	}
	require.Greater(t, laneFast, n*9/10, "the fast path reads the lane events' args the bus writes")
	// The rest are extra keys made equal by invalid UTF-8 (each \ufffd):
	// duplicates go to encoding/json.
	require.Greater(t, fastOnes, n*9/10, "the fast path reads what the encoder writes")
	for _, s := range []string{
		`{"consumer":"c","event":"{\"id\":\"e\",\"event_type\":\"t\",\"event_version\":1,\"event_kind\":\"k\",\"payload\":null,\"metadata\":{},\"created_at\":\"@TS@\"}"}`,
		`{"consumer":"c","event":"{\"id\":\"\\ud83d\\ude00 \\ud800 x\",\"event_type\":\"t\",\"event_version\":1,\"event_kind\":\"k\",\"payload\":1,\"metadata\":{},\"created_at\":\"@TS@\"}"}`,
		`{"Consumer":"c","event":"{}"}`,
		`{"consumer":"c","event":"{\"id\":\"e\",\"event_type\":\"t\",\"event_version\":1.5,\"event_kind\":\"k\",\"payload\":1,\"metadata\":{},\"created_at\":\"@TS@\"}"}`,
		`{"consumer":"c","event":"{\"id\":\"e\",\"event_type\":\"t\",\"event_version\":1,\"event_kind\":\"k\",\"payload\": {\"a\" : 1},\"metadata\":{\"extra\":{}},\"created_at\":\"@TS@\"}"}`,
		`{"consumer":"c","event":"{\"id\":\"e\",\"event_type\":\"t\",\"event_version\":1,\"event_kind\":\"k\",\"payload\":{\"a\":1},\"metadata\":{\"extra\":{}},\"created_at\":\"@TS@\"}"}`,
		"{\"consumer\":\"\xff\",\"event\":\"{}\"}",
		`{"consumer":"c","seq":01,"event":"{}"}`,
		`{"consumer":"c","seq":99999999999999999999,"event":"{}"}`,
		`{"consumer":"c","event":"{}"} `,
	} {
		decodeBoth(t, []byte(strings.ReplaceAll(s, "@TS@", createdAtText)))
	}
}

// createdAtText is an event's created_at as the args' JSON has it.
var createdAtText = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC).Format(time.RFC3339)

func mustMarshalUnescaped(t *testing.T, ev outbox.Event) json.RawMessage {
	t.Helper()
	b, err := marshalUnescaped(ev)
	require.NoError(t, err)
	return b
}

// mutate changes b at a random place: a byte dropped, doubled or replaced
// by one of the pieces.
func mutate(r *rand.Rand, b []byte) []byte {
	i := r.IntN(len(b))
	var s strings.Builder
	s.Write(b[:i])
	switch r.IntN(3) {
	case 0:
	case 1:
		s.WriteByte(b[i])
		s.WriteByte(b[i])
	default:
		s.WriteString(pieces[r.IntN(len(pieces))])
	}
	s.Write(b[i+1:])
	return []byte(s.String())
}

// TestDecodeDispatchArgsFromJSONB: args as Postgres prints them from
// jsonb (keys shortest first, spaces after colons and commas) decode on the
// fast path, to what encoding/json decodes.
func TestDecodeDispatchArgsFromJSONB(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	r := rand.New(rand.NewPCG(5, 6))
	var in []string
	for i := 0; i < 500; i++ {
		a := randomArgs(r)
		b, err := appendDispatchArgs(nil, &a)
		require.NoError(t, err)
		if !strings.Contains(a.Consumer+a.AggregateID, "\x00") { // jsonb has no NUL
			in = append(in, string(b))
		}
	}
	var out []string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT array_agg(a::jsonb::text ORDER BY o) FROM unnest($1::text[]) WITH ORDINALITY AS u(a, o)`, in).Scan(&out))
	require.Len(t, out, len(in))
	fastOnes := 0
	for _, s := range out {
		var fast dispatchArgs
		if decodeDispatchArgsFast([]byte(s), &fast) {
			fastOnes++
		}
		_, err := decodeBoth(t, []byte(s))
		require.NoError(t, err)
	}
	require.Greater(t, fastOnes, len(out)*9/10, "the fast path reads args printed by jsonb")
}
