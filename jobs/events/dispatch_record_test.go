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
//
// Each case has a database and a proxy of its own, so one cut at a time:
// when the two shared one, a cut from the batch's handler that landed on
// the lane job's second completion (the batch dispatched about a second
// after the lane's first run, as under CI load) made the lane run a third
// time, which the exact counts below took for a defect (seen under CI
// load; reproduced by delaying the batch's emission 1.2 s).
func TestDispatchRecordLosesConnection(t *testing.T) {
	t.Parallel()

	// run starts a consumer whose handler, on the first call for the event
	// text cutter, cuts the connections for a moment before it returns
	// (failing that call when fail is set), emits what emit emits, and
	// waits until the dispatch job that job finds has completed. It returns
	// the job's attempt and errors and the handler calls per event text.
	run := func(t *testing.T, cutter string, fail bool, emit func(*pgtest.DB, *events.Emitter) string,
		job func(*pgtest.DB, string) (string, int, string)) (int, string, map[string]int) {
		db := pgtest.New(t)
		proxy, via := pgtest.ThroughCutProxy(t, db)
		var mu sync.Mutex
		calls := map[string]int{}
		c := fastConsumer(t, "cut", nil)
		events.On(c, noteEvent, func(ctx context.Context, m events.Message[noteV1]) error {
			mu.Lock()
			calls[m.Payload.Text]++
			first := calls[m.Payload.Text] == 1
			mu.Unlock()
			if !first || m.Payload.Text != cutter {
				return nil
			}
			proxy.Cut()
			time.AfterFunc(300*time.Millisecond, proxy.Restore)
			if fail {
				return errors.New("fails once")
			}
			return nil
		})
		// One forward loop: with two, rows without an aggregate are in both
		// loops' shares, and the two events of the batch case could be
		// claimed one by each loop, at the same moment, and dispatched as
		// two lone dispatch jobs instead of one batched dispatch.
		startEvents(t, via, events.ForwarderConfig{Concurrency: 1}, c)
		t.Cleanup(func() {
			if t.Failed() {
				dumpJobsAndOutbox(t, db)
			}
		})
		id := emit(db, newEmitter(t, db))
		pgtest.WaitFor(t, 60*time.Second, "the dispatch job completes", func() (bool, error) {
			st, _, _ := job(db, id)
			return st == "completed", nil
		})
		st, attempt, errs := job(db, id)
		require.Equal(t, "completed", st)
		mu.Lock()
		defer mu.Unlock()
		out := map[string]int{}
		for k, v := range calls {
			out[k] = v
		}
		return attempt, errs, out
	}

	t.Run("completion in the lane", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		attempt, errs, calls := run(t, "lane", false, func(db *pgtest.DB, em *events.Emitter) string {
			id, err := em.Emit(ctx, db.Pool, noteEvent, noteV1{Text: "lane"}, events.Meta{AggregateID: "a"})
			require.NoError(t, err)
			return id
		}, func(db *pgtest.DB, id string) (string, int, string) {
			var st, errs string
			var attempt int
			err := db.Pool.QueryRow(ctx, db.Q(`SELECT state::text, attempt, coalesce(errors::text, '') FROM /*schema*/river_job
            WHERE kind = 'tributary.event.dispatch' AND (args->>'event')::jsonb->>'id' = $1`), id).Scan(&st, &attempt, &errs)
			if err != nil {
				return "", 0, ""
			}
			return st, attempt, errs
		})
		require.Equal(t, 1, attempt, "the lane's completion lost its connection: no attempt spent (errors %s)", errs)
		require.Empty(t, errs)
		require.Equal(t, 2, calls["lane"], "handled, not recorded, handled again")
	})

	t.Run("outcome of a batched dispatch", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		attempt, errs, calls := run(t, "fails", true, func(db *pgtest.DB, em *events.Emitter) string {
			// Two events without an aggregate in one transaction: one
			// batched dispatch.
			ids, err := em.EmitMany(ctx, db.Pool, []events.Emission{
				{Def: noteEvent, Payload: noteV1{Text: "ok"}}, {Def: noteEvent, Payload: noteV1{Text: "fails"}}})
			require.NoError(t, err)
			return ids[1]
		}, func(db *pgtest.DB, id string) (string, int, string) {
			var st, errs string
			var attempt int
			err := db.Pool.QueryRow(ctx, db.Q(`SELECT state::text, attempt, coalesce(errors::text, '') FROM /*schema*/river_job
            WHERE kind = 'tributary.event.dispatch_batch' AND args::text LIKE '%' || $1 || '%'`), id).Scan(&st, &attempt, &errs)
			if err != nil {
				return "", 0, ""
			}
			return st, attempt, errs
		})
		require.Equal(t, 1, attempt, "the batch's outcome lost its connection: no attempt spent (errors %s)", errs)
		require.Empty(t, errs)
		require.Equal(t, 2, calls["fails"])
		require.Equal(t, 2, calls["ok"], "the whole batch runs again (at-least-once)")
	})
}

// dumpJobsAndOutbox logs every River job and outbox row of db, for a test
// that failed waiting on them.
func dumpJobsAndOutbox(t *testing.T, db *pgtest.DB) {
	db.LogRows(t,
		`SELECT id, kind, state, attempt, max_attempts, scheduled_at, attempted_at, finalized_at, coalesce(errors::text, ''), metadata::text, args::text FROM /*schema*/river_job ORDER BY id`,
		`SELECT id, position, status, retry_count, coalesce(last_error, ''), coalesce(claimed_by, ''), claimed_at, sent_at FROM /*schema*/tributary_outbox ORDER BY position`,
		`SELECT now()`)
}
