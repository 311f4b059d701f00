package events_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/jobs/events"
)

// insertFailedRows writes n FAILED outbox rows directly, as a long broker
// outage would leave them.
func insertFailedRows(t testing.TB, db *pgtest.DB, n int) {
	t.Helper()
	_, err := db.Pool.Exec(context.Background(), db.Q(`
        INSERT INTO /*schema*/tributary_outbox (id, event_type, event_version, event_kind, aggregate_id, payload, metadata,
            source_service, status, retry_count, last_error, created_at, failed_at)
        SELECT gen_random_uuid(), 'test.note', 1, 'integration', CASE WHEN i % 10 = 0 THEN NULL ELSE 'agg-' || (i % 100) END,
            '{"text":"x"}', '{}', 'test', 'FAILED', 10, 'broker down', now(), now()
        FROM generate_series(1, $1) AS i`), n)
	require.NoError(t, err)
}

// TestReplayFailedLarge replays 20,000 FAILED rows in bounded batches, each
// committed on its own, and counts them right (on the old code the count
// was 1: the tag of the SELECT around the UPDATE).
func TestReplayFailedLarge(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	const n = 20000
	insertFailedRows(t, db, n)

	var progress []int
	start := time.Now()
	replayed, err := events.ReplayFailedBatches(ctx, db.Pool, db.Schema, events.ReplayFailedParams{
		BatchSize:    3000,
		ProgressFunc: func(replayed int) { progress = append(progress, replayed) },
	})
	t.Logf("replayed %d FAILED rows in %s", replayed, time.Since(start))
	require.NoError(t, err)
	require.Equal(t, n, replayed)
	require.Equal(t, []int{3000, 6000, 9000, 12000, 15000, 18000, 20000}, progress)
	var pending int
	require.NoError(t, db.Pool.QueryRow(ctx, db.Q(`SELECT count(*) FROM /*schema*/tributary_outbox WHERE status = 'PENDING' AND retry_count = 0 AND last_error IS NULL`)).Scan(&pending))
	require.Equal(t, n, pending)

	again, err := events.ReplayFailed(ctx, db.Pool, db.Schema)
	require.NoError(t, err)
	require.Zero(t, again, "nothing FAILED is left")
}

// TestReplayOutboxCount: a replay of named rows reports how many it put
// back (on the old code: 1 for any number).
func TestReplayOutboxCount(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	insertFailedRows(t, db, 3)
	rows, err := events.ListOutbox(ctx, db.Pool, db.Schema, events.ListParams{Status: events.StatusFailed})
	require.NoError(t, err)
	ids := []string{rows[0].ID, rows[1].ID, rows[2].ID}
	n, err := events.ReplayOutbox(ctx, db.Pool, db.Schema, ids)
	require.NoError(t, err)
	require.Equal(t, 3, n)
}
