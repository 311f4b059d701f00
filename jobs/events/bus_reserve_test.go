package events_test

import (
	"context"
	"testing"
	"time"

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
	_, f, em := startBusForwarder(t, db, "moved")
	first, err := em.Emit(ctx, db.Pool, noteEvent, noteV1{Text: "1"}, events.Meta{AggregateID: "z"})
	require.NoError(t, err)
	_, err = f.ForwardOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(1), jobSeq(t, db, "moved", first))

	other, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = other.Rollback(ctx) }()
	var otherPID int
	require.NoError(t, other.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&otherPID))
	_, err = other.Exec(ctx, db.Q(`UPDATE /*schema*/tributary_event_lane SET last_seq = last_seq + 2 WHERE aggregate_id = 'z'`))
	require.NoError(t, err)

	second, err := em.Emit(ctx, db.Pool, noteEvent, noteV1{Text: "2"}, events.Meta{AggregateID: "z"})
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

	require.Equal(t, int64(4), jobSeq(t, db, "moved", second), "the numbers the other transaction reserved are not reused")
	_, state, _ := dispatchJob(t, db, "moved", second)
	require.Equal(t, "pending", state)
	var n int
	require.NoError(t, db.Pool.QueryRow(ctx, db.Q(`SELECT count(*) FROM /*schema*/river_job WHERE kind = 'tributary.event.dispatch'`)).Scan(&n))
	require.Equal(t, 2, n, "the rolled-back insert left no job")
	var last int64
	require.NoError(t, db.Pool.QueryRow(ctx, db.Q(`SELECT last_seq FROM /*schema*/tributary_event_lane WHERE aggregate_id = 'z'`)).Scan(&last))
	require.Equal(t, int64(4), last)
}

func jobSeq(t *testing.T, db *pgtest.DB, consumer, eventID string) int64 {
	t.Helper()
	var seq int64
	require.NoError(t, db.Pool.QueryRow(context.Background(), db.Q(`
        SELECT (args->>'seq')::bigint FROM /*schema*/river_job
        WHERE kind = 'tributary.event.dispatch' AND args->>'consumer' = $1 AND (args->>'event')::jsonb->>'id' = $2`),
		consumer, eventID).Scan(&seq))
	return seq
}
