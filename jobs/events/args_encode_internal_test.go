package events

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/outbox"
)

// pieces are what the random strings are made of: every byte the encoder
// treats apart (quotes, backslashes, control characters, HTML characters,
// U+2028/U+2029, invalid UTF-8) and plain text of every width.
var pieces = func() []string {
	p := []string{`"`, `\`, "<", ">", "&", "\u2028", "\u2029", "é", "日本", "😀", "\x7f", "\xff", "\xc3", "\xe2\x80", "\xed\xa0\x80",
		"plain", " ", "/", "'", "\u00a0", "\ufeff", "\ufffd"}
	for c := 0; c < 0x20; c++ {
		p = append(p, string(rune(c)))
	}
	return p
}()

func randomString(r *rand.Rand) string {
	var b strings.Builder
	for n := r.IntN(8); n > 0; n-- {
		b.WriteString(pieces[r.IntN(len(pieces))])
	}
	return b.String()
}

// randomPayload is valid JSON written with spaces, as jsonb prints it.
func randomPayload(r *rand.Rand, depth int) string {
	switch k := r.IntN(6); {
	case k == 0 || depth > 2:
		s, _ := json.Marshal(strings.ToValidUTF8(randomString(r), "?"))
		return string(s)
	case k == 1:
		return []string{"1", "-2.5e10", "true", "null", "0.000001"}[r.IntN(5)]
	case k == 2:
		return "[ " + randomPayload(r, depth+1) + " , " + randomPayload(r, depth+1) + " ]"
	default:
		key, _ := json.Marshal(strings.ToValidUTF8(randomString(r), "?"))
		return `{ ` + string(key) + ` : ` + randomPayload(r, depth+1) + ` , "n": 1 }`
	}
}

// TestAppendDispatchArgsMatchesEncodingJSON: the hand-written encoder of a
// dispatch's args writes exactly what encoding/json writes.
func TestAppendDispatchArgsMatchesEncodingJSON(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 5000; i++ {
		ev := randomEvent(r)
		a := dispatchArgs{Consumer: randomString(r), AggregateID: randomString(r), Event: ev}
		if r.IntN(2) == 0 {
			a.Seq = r.Int64N(1e12) - 1e6
		}
		want, err := a.marshalReflect()
		require.NoError(t, err)
		got, err := appendDispatchArgs(nil, &a)
		require.NoError(t, err)
		require.Equal(t, string(want), string(got), "event %d: %#v", i, a)
		viaMarshal, err := json.Marshal(a)
		require.NoError(t, err)
		require.Equal(t, string(want), string(viaMarshal))

		s := randomString(r)
		html, _ := json.Marshal(s)
		require.Equal(t, string(html), string(appendJSONString(nil, s, true)), "%q", s)
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		require.NoError(t, enc.Encode(s))
		require.Equal(t, strings.TrimSuffix(buf.String(), "\n"), string(appendJSONString(nil, []byte(s), false)), "%q", s)
	}
}

// randomEvent is an event of random strings (quotes, backslashes, control
// characters, <>&, U+2028/9, invalid UTF-8), times in several zones and
// mostly a random payload.
func randomEvent(r *rand.Rand) outbox.Event {
	zones := []*time.Location{time.UTC, time.FixedZone("x", -5*3600-30*60), time.FixedZone("y", 14*3600)}
	ev := outbox.Event{ID: randomString(r), EventType: randomString(r), EventVersion: r.IntN(2000) - 1000,
		EventKind: randomString(r), AggregateID: randomString(r), SourceService: randomString(r),
		CreatedAt: time.Date(1+r.IntN(9998), time.Month(1+r.IntN(12)), 1+r.IntN(28), r.IntN(24), r.IntN(60), r.IntN(60),
			[]int{0, 1, 120000000, r.IntN(1e9)}[r.IntN(4)], zones[r.IntN(len(zones))]),
		Metadata: outbox.Metadata{CorrelationID: randomString(r), CausationID: randomString(r), Actor: randomString(r),
			TraceParent: randomString(r), TraceState: randomString(r)}}
	if r.IntN(4) > 0 {
		ev.Payload = json.RawMessage(randomPayload(r, 0))
	}
	if n := r.IntN(4); n > 0 {
		ev.Metadata.Extra = map[string]string{}
		for ; n > 0; n-- {
			ev.Metadata.Extra[randomString(r)] = randomString(r)
		}
	}
	return ev
}

// TestAppendDispatchBatchArgsMatchesEncodingJSON: the batched dispatch
// job's args written by hand are what encoding/json wrote, for batches of
// none to a few dozen random events.
func TestAppendDispatchBatchArgsMatchesEncodingJSON(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 500; i++ {
		a := dispatchBatchArgs{Consumer: randomString(r)}
		if n := r.IntN(40); n > 0 || r.IntN(2) == 0 {
			a.Events = make([]outbox.Event, n)
			for j := range a.Events {
				a.Events[j] = randomEvent(r)
			}
		}
		want, err := a.marshalReflect()
		require.NoError(t, err)
		got, err := appendDispatchBatchArgs(nil, &a)
		require.NoError(t, err)
		require.Equal(t, string(want), string(got), "batch %d: %#v", i, a)
		viaMarshal, err := json.Marshal(a)
		require.NoError(t, err)
		require.Equal(t, string(want), string(viaMarshal))
		var back dispatchBatchArgs
		require.NoError(t, json.Unmarshal(got, &back))
		require.Len(t, back.Events, len(a.Events))
	}

	bad := dispatchBatchArgs{Consumer: "c", Events: []outbox.Event{{ID: "e0"}, {ID: "e1", Payload: json.RawMessage(`{"a":`)}}}
	_, err := bad.marshalReflect()
	require.Error(t, err)
	_, err = appendDispatchBatchArgs(nil, &bad)
	require.ErrorContains(t, err, "error encoding event e1")
	late := dispatchBatchArgs{Consumer: "c", Events: []outbox.Event{{ID: "e0"}, {ID: "e2", CreatedAt: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}}}
	_, err = appendDispatchBatchArgs(nil, &late)
	require.Error(t, err)
}

// TestAppendDispatchArgsRejectsWhatEncodingJSONRejects: a payload that is
// not JSON, and a time encoding/json cannot write, fail as they did.
func TestAppendDispatchArgsRejectsWhatEncodingJSONRejects(t *testing.T) {
	t.Parallel()
	bad := dispatchArgs{Consumer: "c", Event: outbox.Event{ID: "e1", Payload: json.RawMessage(`{"a":`)}}
	_, err := bad.marshalReflect()
	require.Error(t, err)
	_, err = appendDispatchArgs(nil, &bad)
	require.ErrorContains(t, err, "json.RawMessage")

	late := dispatchArgs{Consumer: "c", Event: outbox.Event{ID: "e2", CreatedAt: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}}
	_, err = late.marshalReflect()
	require.Error(t, err)
	_, err = appendDispatchArgs(nil, &late)
	require.Error(t, err)
}
