package events_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/jobs/events"
)

// TestDispatchRecordLosesConnection cuts the worker's database connections
// right after a handler returned, so the dispatcher's own write fails: the
// completion in the lane (an event with an aggregate) and a batched
// dispatch's outcome (a failed event among others without one). Those are
// not the handler's failures: each job runs again without spending an
// attempt (the old code failed the attempt, and a burst of terminated
// sessions discarded events that never failed, make chaos at 22:41 UTC).
func TestDispatchRecordLosesConnection(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	proxy, via := pgtest.ThroughCutProxy(t, db)

	// The first call of each of these cuts the connections for a moment
	// before it returns; "fails" also fails that first call.
	cutters := map[string]bool{"lane": true, "fails": true}
	var mu sync.Mutex
	calls := map[string]int{}
	c := fastConsumer(t, "cut", nil)
	events.On(c, noteEvent, func(ctx context.Context, m events.Message[noteV1]) error {
		mu.Lock()
		calls[m.Payload.Text]++
		first := calls[m.Payload.Text] == 1
		mu.Unlock()
		if !first || !cutters[m.Payload.Text] {
			return nil
		}
		proxy.Cut()
		time.AfterFunc(300*time.Millisecond, proxy.Restore)
		if m.Payload.Text == "fails" {
			return errors.New("fails once")
		}
		return nil
	})
	startEvents(t, via, events.ForwarderConfig{}, c)

	em := newEmitter(t, db)
	lane, err := em.Emit(ctx, db.Pool, noteEvent, noteV1{Text: "lane"}, events.Meta{AggregateID: "a"})
	require.NoError(t, err)
	// Two events without an aggregate in one transaction: one batched
	// dispatch.
	batched, err := em.EmitMany(ctx, db.Pool, []events.Emission{
		{Def: noteEvent, Payload: noteV1{Text: "ok"}}, {Def: noteEvent, Payload: noteV1{Text: "fails"}}})
	require.NoError(t, err)

	laneJob := func() (string, int, string) {
		var st, errs string
		var attempt int
		err := db.Pool.QueryRow(ctx, db.Q(`SELECT state::text, attempt, coalesce(errors::text, '') FROM /*schema*/river_job
            WHERE kind = 'tributary.event.dispatch' AND (args->>'event')::jsonb->>'id' = $1`), lane).Scan(&st, &attempt, &errs)
		if err != nil {
			return "", 0, ""
		}
		return st, attempt, errs
	}
	batchJob := func() (string, int, string) {
		var st, errs string
		var attempt int
		err := db.Pool.QueryRow(ctx, db.Q(`SELECT state::text, attempt, coalesce(errors::text, '') FROM /*schema*/river_job
            WHERE kind = 'tributary.event.dispatch_batch' AND args::text LIKE '%' || $1 || '%'`), batched[1]).Scan(&st, &attempt, &errs)
		if err != nil {
			return "", 0, ""
		}
		return st, attempt, errs
	}
	pgtest.WaitFor(t, 60*time.Second, "both dispatch jobs complete", func() (bool, error) {
		ls, _, _ := laneJob()
		bs, _, _ := batchJob()
		return ls == "completed" && bs == "completed", nil
	})
	st, attempt, errs := laneJob()
	require.Equal(t, "completed", st)
	require.Equal(t, 1, attempt, "the lane's completion lost its connection: no attempt spent (errors %s)", errs)
	require.Empty(t, errs)
	st, attempt, errs = batchJob()
	require.Equal(t, "completed", st)
	require.Equal(t, 1, attempt, "the batch's outcome lost its connection: no attempt spent (errors %s)", errs)
	require.Empty(t, errs)

	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, 2, calls["lane"], "handled, not recorded, handled again")
	require.Equal(t, 2, calls["fails"])
	require.Equal(t, 2, calls["ok"], "the whole batch runs again (at-least-once)")
}
