package events_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/jobs/events"
)

// TestPublishAfterLaneMoved: the bus reads a lane's last sequence number
// without a lock and reserves after its insert. When the lane moved in
// between (here another transaction holding the lane row has reserved two
// more), the publish must not reuse those numbers: its job gets the number
// after them, pending behind them, as a reservation made first would give.
func TestPublishAfterLaneMoved(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	f, em, first := forwardFirst(t, db, "moved")
	require.Equal(t, int64(1), jobSeq(t, db, "moved", first))

	second := forwardWhileLaneHeld(t, db, f, em, "z", `UPDATE /*schema*/tributary_event_lane SET last_seq = last_seq + 2 WHERE aggregate_id = 'z'`)

	require.Equal(t, int64(4), jobSeq(t, db, "moved", second), "the numbers the other transaction reserved are not reused")
	_, state, _ := dispatchJob(t, db, "moved", second)
	require.Equal(t, laneEvent, state)
	require.Equal(t, 2, dispatchJobCount(t, db), "the rolled-back insert left no job")
	var last int64
	require.NoError(t, db.Pool.QueryRow(ctx, db.Q(`SELECT last_seq FROM /*schema*/tributary_event_lane WHERE aggregate_id = 'z'`)).Scan(&last))
	require.Equal(t, int64(4), last)
}

// forwardFirst starts a bus consumer named consumer and its forwarder,
// emits the first event of aggregate "z" and forwards it; it returns the
// forwarder, the emitter and the event's id.
func forwardFirst(t *testing.T, db *pgtest.DB, consumer string) (*events.Forwarder, *events.Emitter, string) {
	t.Helper()
	ctx := context.Background()
	_, f, em := startBusForwarder(t, db, consumer)
	id, err := em.Emit(ctx, db.Pool, noteEvent, noteV1{Text: "1"}, events.Meta{AggregateID: "z"})
	require.NoError(t, err)
	_, err = f.ForwardOnce(ctx)
	require.NoError(t, err)
	return f, em, id
}

// dispatchJobCount counts the dispatches: jobs and lane events.
func dispatchJobCount(t *testing.T, db *pgtest.DB) int {
	t.Helper()
	var n int
	require.NoError(t, db.Pool.QueryRow(context.Background(), db.Q(`SELECT (SELECT count(*) FROM /*schema*/river_job WHERE kind = 'tributary.event.dispatch')
        + (SELECT count(*) FROM /*schema*/tributary_event_lane_event)`)).Scan(&n))
	return n
}

// jobSeq is the lane sequence number of the event's dispatch, a job or a
// lane event.
func jobSeq(t *testing.T, db *pgtest.DB, consumer, eventID string) int64 {
	t.Helper()
	var seq int64
	require.NoError(t, db.Pool.QueryRow(context.Background(), db.Q(`
        SELECT (args->>'seq')::bigint FROM /*schema*/river_job
        WHERE kind = 'tributary.event.dispatch' AND args->>'consumer' = $1 AND (args->>'event')::jsonb->>'id' = $2
        UNION ALL
        SELECT seq FROM /*schema*/tributary_event_lane_event WHERE consumer = $1 AND (args::jsonb->>'event')::jsonb->>'id' = $2`),
		consumer, eventID).Scan(&seq))
	return seq
}

// forwardWhileLaneHeld runs update on aggregate agg's lane in a transaction
// of its own, emits an event of agg and forwards it, and commits the update
// once the forward waits for the lane's row; it returns the event's id.
func forwardWhileLaneHeld(t *testing.T, db *pgtest.DB, f *events.Forwarder, em *events.Emitter, agg, update string) string {
	t.Helper()
	ctx := context.Background()
	other, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = other.Rollback(ctx) }()
	var otherPID int
	require.NoError(t, other.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&otherPID))
	_, err = other.Exec(ctx, db.Q(update))
	require.NoError(t, err)

	id, err := em.Emit(ctx, db.Pool, noteEvent, noteV1{Text: "2"}, events.Meta{AggregateID: agg})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { _, err := f.ForwardOnce(ctx); done <- err }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var waiting int
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE $1::int = ANY(pg_blocking_pids(pid))`, otherPID).Scan(&waiting))
		if waiting > 0 {
			break
		}
		require.True(t, time.Now().Before(deadline), "the forwarder never waited for the lane")
		select {
		case err := <-done:
			t.Fatalf("the forward ended before the lane was released: %v", err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	require.NoError(t, other.Commit(ctx))
	require.NoError(t, <-done)
	return id
}

// TestPublishIdleLaneMoved: a lane read idle (its head past its last
// event), whose next event the bus therefore inserts as the available head,
// but whose last_seq another transaction moved before the reservation: the
// insert is rolled back and redone under the lock, as a pending job behind
// the numbers the other transaction reserved.
func TestPublishIdleLaneMoved(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	f, em, first := forwardFirst(t, db, "idle")
	// The head's completion, without the job's: the lane is idle.
	_, err := db.Pool.Exec(ctx, db.Q(`UPDATE /*schema*/tributary_event_lane SET head_seq = 2 WHERE aggregate_id = 'z'`))
	require.NoError(t, err)

	second := forwardWhileLaneHeld(t, db, f, em, "z", `UPDATE /*schema*/tributary_event_lane SET last_seq = last_seq + 2 WHERE aggregate_id = 'z'`)
	require.Equal(t, int64(4), jobSeq(t, db, "idle", second))
	_, state, _ := dispatchJob(t, db, "idle", second)
	require.Equal(t, laneEvent, state, "not the head: the lane's head is at 2")
	require.Equal(t, 2, dispatchJobCount(t, db), "the rolled-back head left no job")
	require.Equal(t, int64(1), jobSeq(t, db, "idle", first))
}

// TestPublishLaneCaughtUp: a lane read busy (its head at an unfinished
// event), whose head moved to the next number before the reservation (the
// head completed): the bus's pending job at that number is promoted under
// the lane's lock.
func TestPublishLaneCaughtUp(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	f, em, _ := forwardFirst(t, db, "caught")

	second := forwardWhileLaneHeld(t, db, f, em, "z", `UPDATE /*schema*/tributary_event_lane SET head_seq = 2 WHERE aggregate_id = 'z'`)
	require.Equal(t, int64(2), jobSeq(t, db, "caught", second))
	id, state, _ := dispatchJob(t, db, "caught", second)
	require.Equal(t, "available", state, "the head's job")
	var turn bool
	require.NoError(t, db.Pool.QueryRow(ctx, db.Q(`SELECT metadata ? 'tributary_lane_turn' FROM /*schema*/river_job WHERE id = $1`), id).Scan(&turn))
	require.True(t, turn, "marked as its lane's turn")
}

// TestLanesReadProbesThePrimaryKey: the bus's read of every consumer's
// lanes of a forward round's aggregates runs with the generic plan the rest
// of the bus's statements run with (made without sequential scans, hash or
// merge joins), and a connection keeps that plan once made: here it is made
// while the lanes' table is empty, as on a forwarder's earliest rounds, and run
// after 20,000 lanes were written (without statistics, and with them). It
// must look up each (consumer, aggregate) in the lanes' primary key. Written
// as a plain join, that plan probed the primary key with the aggregate
// alone, its second column, which reads the whole index for each
// aggregate: 54 ms a round of 1,000 aggregates in bench events.
func TestLanesReadProbesThePrimaryKey(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, db.Q(`
INSERT INTO /*schema*/tributary_event_consumer (name, patterns, queue, max_attempts, source_service, skip_own_kinds, updated_at, seen_at)
VALUES ('alpha', '{*}', 'default', 4, '', '{}', now(), now()), ('beta', '{*}', 'default', 4, '', '{}', now(), now())`))
	require.NoError(t, err)
	bus, err := events.NewBus(db.Client(t))
	require.NoError(t, err)
	aggregates := []string{"agg-1", "agg-5000", "agg-9999", "agg-none"}
	for _, analyze := range []bool{false, true} {
		plan, err := bus.ExplainAnalyzeLanesRead(ctx, db.Pool, aggregates, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, db.Q(`
INSERT INTO /*schema*/tributary_event_lane (consumer, aggregate_id, head_seq, last_seq, updated_at)
SELECT c, 'agg-' || i, 1, 1, now() FROM generate_series(1, 10000) AS i, (VALUES ('alpha'), ('beta')) AS v(c)`))
			if err == nil && analyze {
				_, err = tx.Exec(ctx, db.Q(`ANALYZE /*schema*/tributary_event_lane`))
			}
			return err
		})
		require.NoError(t, err)
		blocks := 0.0
		root := walkPlan(t, plan, func(n planNode) {
			if n["Relation Name"] == "tributary_event_lane" {
				blocks += n.num("Shared Hit Blocks") + n.num("Shared Read Blocks")
			}
		})
		rows := root.num("Actual Rows")
		require.Equal(t, 6.0, rows, "analyzed: %v: three of the aggregates have a lane of each of the two consumers\n%s", analyze, plan)
		// A probe of the primary key reads its root, a leaf and, for a
		// lane, its heap page: 8 probes, at most 32 blocks. A walk of a
		// consumer's range reads its hundred leaves for every aggregate.
		require.LessOrEqual(t, blocks, 32.0, "analyzed: %v: blocks of the lanes read for 4 aggregates of 2 consumers\n%s", analyze, plan)
	}
}
