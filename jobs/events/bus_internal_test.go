package events

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/outbox"
)

func TestBatchLen(t *testing.T) {
	t.Parallel()
	small := outbox.Event{Payload: json.RawMessage(`{"n":1}`)}
	big := outbox.Event{Payload: json.RawMessage(`"` + strings.Repeat("x", 600<<10) + `"`)}
	huge := outbox.Event{Payload: json.RawMessage(`"` + strings.Repeat("x", dispatchBatchMaxBytes) + `"`)}
	repeat := func(ev outbox.Event, n int) []outbox.Event {
		out := make([]outbox.Event, n)
		for i := range out {
			out[i] = ev
		}
		return out
	}
	for _, tt := range []struct {
		name string
		evs  []outbox.Event
		max  int
		want int
	}{
		{"fewer than max", repeat(small, 3), 100, 3},
		{"max events", repeat(small, 250), 100, 100},
		{"max 1", repeat(small, 5), 1, 1},
		{"bytes end the batch", []outbox.Event{big, big, small}, 100, 1},
		{"small events then a big one", []outbox.Event{small, small, big, big}, 100, 3},
		{"an event over the limit goes alone", []outbox.Event{huge, small}, 100, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, batchLen(tt.evs, tt.max))
		})
	}
}
