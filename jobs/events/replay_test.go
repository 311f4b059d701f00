package events_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/jobs/events"
	"github.com/tributary-run/tributary/outbox"
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
// committed on its own, and counts them right (the statement's result, not
// its command tag, which counts the one row of the SELECT around the
// UPDATE).
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
// back (the command tag would say 1 for any number).
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

// countingTx is a transactional publisher that counts what it was handed.
type countingTx struct {
	mu     sync.Mutex
	counts map[string]int
}

func (p *countingTx) Name() string { return "counting-tx" }

func (p *countingTx) PublishOutbox(context.Context, []outbox.Event) error {
	return errors.New("not used")
}

func (p *countingTx) PublishOutboxTx(ctx context.Context, tx pgx.Tx, evs []outbox.Event) (func(context.Context), error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, e := range evs {
		p.counts[e.ID]++
	}
	return nil, nil
}

var _ outbox.TxPublisher = (*countingTx)(nil)

func (p *countingTx) count(id string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.counts[id]
}

// TestReplayDestinations: a replayed FAILED row goes only to the
// destinations that did not have it; a replayed SENT row to all of them.
func TestReplayDestinations(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	id, err := newEmitter(t, db).Emit(ctx, db.Pool, noteEvent, noteV1{Text: "x"}, events.Meta{})
	require.NoError(t, err)
	var refusing atomic.Bool
	refusing.Store(true)
	txPub := &countingTx{counts: map[string]int{}}
	plain := newEachPublisher("plain", func(outbox.Event, int) bool { return refusing.Load() })
	f, err := events.NewForwarder(db.Pool, events.ForwarderConfig{Schema: db.Schema, Publishers: []outbox.Publisher{txPub, plain}, MaxRetries: 1})
	require.NoError(t, err)
	plainAttempts := func() int { _, a, _ := plain.snapshot(); return a[id] }

	_, err = f.ForwardOnce(ctx)
	require.ErrorContains(t, err, "plain: refused")
	require.Equal(t, events.StatusFailed, outboxStatus(t, db, id))
	require.Equal(t, 1, txPub.count(id))
	require.Equal(t, 1, plainAttempts())

	refusing.Store(false)
	n, err := events.ReplayOutbox(ctx, db.Pool, db.Schema, []string{id})
	require.NoError(t, err)
	require.Equal(t, 1, n)
	_, err = f.ForwardOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, events.StatusSent, outboxStatus(t, db, id))
	require.Equal(t, 1, txPub.count(id), "the FAILED row's replay skipped the destination that had it")
	require.Equal(t, 2, plainAttempts())

	_, err = events.ReplayOutbox(ctx, db.Pool, db.Schema, []string{id})
	require.NoError(t, err)
	_, err = f.ForwardOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, events.StatusSent, outboxStatus(t, db, id))
	require.Equal(t, 2, txPub.count(id), "the SENT row's replay went to every destination")
	require.Equal(t, 3, plainAttempts())
}
