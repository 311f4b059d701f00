package events

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/queue"
)

func TestBatchLen(t *testing.T) {
	t.Parallel()
	small := queue.OutboxEvent{Payload: json.RawMessage(`{"n":1}`)}
	big := queue.OutboxEvent{Payload: json.RawMessage(`"` + strings.Repeat("x", 600<<10) + `"`)}
	huge := queue.OutboxEvent{Payload: json.RawMessage(`"` + strings.Repeat("x", DispatchBatchMaxBytes) + `"`)}
	repeat := func(ev queue.OutboxEvent, n int) []queue.OutboxEvent {
		out := make([]queue.OutboxEvent, n)
		for i := range out {
			out[i] = ev
		}
		return out
	}
	for _, tt := range []struct {
		name string
		evs  []queue.OutboxEvent
		max  int
		want int
	}{
		{"fewer than max", repeat(small, 3), 100, 3},
		{"max events", repeat(small, 250), 100, 100},
		{"max 1", repeat(small, 5), 1, 1},
		{"bytes end the batch", []queue.OutboxEvent{big, big, small}, 100, 1},
		{"small events then a big one", []queue.OutboxEvent{small, small, big, big}, 100, 3},
		{"an event over the limit goes alone", []queue.OutboxEvent{huge, small}, 100, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, batchLen(tt.evs, tt.max))
		})
	}
}
