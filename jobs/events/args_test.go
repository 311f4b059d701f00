package events_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/internal/riverjob"
	"github.com/tributary-run/tributary/jobs/events"
)

// TestDispatchArgsShapes: the bus stores an event in a dispatch job's args
// as one string (cheap for River's GIN index on args), and dispatch jobs
// inserted before that, with the event as an object, still run: a lone
// dispatch and a batch.
func TestDispatchArgsShapes(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	var mu sync.Mutex
	seen := map[string]string{}
	c := fastConsumer(t, "shapes", nil)
	events.On(c, noteEvent, func(ctx context.Context, m events.Message[noteV1]) error {
		mu.Lock()
		seen[m.ID] = m.Payload.Text + "|" + m.Metadata.CorrelationID
		mu.Unlock()
		return nil
	})
	startEvents(t, db, events.ForwarderConfig{}, c)

	oldEvent := func(id string) string {
		return `{"id":"` + id + `","event_type":"test.note","event_version":1,"event_kind":"integration",` +
			`"payload":{"text":"old <` + id + `>"},"metadata":{"correlation_id":"corr-` + id + `"},"created_at":"` + time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC).Format(time.RFC3339) + `"}`
	}
	old := []riverjob.AttemptedJob{
		{Kind: events.DispatchKind, Args: []byte(`{"consumer":"shapes","event":` + oldEvent("old-1") + `}`)},
		{Kind: events.DispatchBatchKind, Args: []byte(`{"consumer":"shapes","events":[` + oldEvent("old-2") + `,` + oldEvent("old-3") + `]}`)},
	}
	for i := range old {
		old[i].State, old[i].MaxAttempts, old[i].ScheduledAt = rivertype.JobStateAvailable, 3, time.Now()
	}
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, riverjob.InsertAttempted(ctx, tx, db.Schema, river.QueueDefault, old, time.Now()))
	require.NoError(t, tx.Commit(ctx))
	ids := emitLane(t, db, "agg-1", "new")

	pgtest.WaitFor(t, 15*time.Second, "every event handled", func() (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		return len(seen) == 4, nil
	})
	mu.Lock()
	for _, id := range []string{"old-1", "old-2", "old-3"} {
		require.Equal(t, "old <"+id+">|corr-"+id, seen[id])
	}
	require.Equal(t, "new|", seen[ids[0]])
	mu.Unlock()

	var shape, consumer, agg string
	var seq int64
	var packed string
	require.NoError(t, db.Pool.QueryRow(ctx, db.Q(`SELECT jsonb_typeof(args->'event'), args->>'consumer', args->>'aggregate_id', (args->>'seq')::bigint, args->>'event'
        FROM /*schema*/river_job WHERE kind = 'tributary.event.dispatch' AND args->>'aggregate_id' = 'agg-1'`)).Scan(&shape, &consumer, &agg, &seq, &packed))
	require.Equal(t, "string", shape)
	require.Equal(t, []any{"shapes", "agg-1", int64(1)}, []any{consumer, agg, seq})
	var ev map[string]any
	require.NoError(t, json.Unmarshal([]byte(packed), &ev))
	require.Equal(t, ids[0], ev["id"])
}
