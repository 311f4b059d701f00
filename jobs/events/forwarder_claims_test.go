package events_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/jobs/events"
	"github.com/tributary-run/tributary/outbox"
)

// terminatingPublisher accepts every batch; on its first call it first
// terminates every backend of the forwarder's pool, so the statement that
// records the outcome fails on a dead connection, as when Postgres restarts
// or an operator kills the forwarder's sessions mid-batch.
type terminatingPublisher struct {
	*watchPublisher
	admin   *pgxpool.Pool
	appName string
	done    atomic.Bool
}

func (p *terminatingPublisher) PublishOutbox(ctx context.Context, evs []outbox.Event) error {
	if p.done.CompareAndSwap(false, true) {
		if _, err := p.admin.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1`, p.appName); err != nil {
			return err
		}
	}
	return p.watchPublisher.PublishOutbox(ctx, evs)
}

// TestForwarderOutcomeLostToTheDatabase: a live forwarder whose record of a
// batch's outcome failed (its connections were terminated) keeps the claim
// and records it again once the database answers, well before the 5 minute
// StaleClaimAfter backstop; the destination got each event once.
func TestForwarderOutcomeLostToTheDatabase(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	appName := "tributary-test-terminated-" + db.Schema
	cfg, err := pgxpool.ParseConfig(db.URL)
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["application_name"] = appName
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	pub := &terminatingPublisher{watchPublisher: newWatchPublisher(), admin: db.Pool, appName: appName}
	em := newEmitter(t, db)
	var ids []string
	for i := range 5 {
		id, err := em.Emit(ctx, db.Pool, noteEvent, noteV1{Text: fmt.Sprint(i)}, events.Meta{AggregateID: "a"})
		require.NoError(t, err)
		ids = append(ids, id)
	}
	f, err := events.NewForwarder(pool, events.ForwarderConfig{Schema: db.Schema, Logger: pgtest.Logger(t),
		Publishers: []outbox.Publisher{pub}, SweepInterval: 100 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, f.Start(ctx))
	t.Cleanup(func() { _ = f.Stop(context.Background()) })

	pgtest.WaitFor(t, 10*time.Second, "every row SENT", func() (bool, error) {
		for _, id := range ids {
			if outboxRow(t, db, id).Status != events.StatusSent {
				return false, nil
			}
		}
		return true, nil
	})
	require.True(t, pub.done.Load(), "the publisher terminated the forwarder's connections")
	pub.mu.Lock()
	defer pub.mu.Unlock()
	for _, id := range ids {
		require.Equal(t, 1, pub.counts[id], "event %s published once", id)
	}
}

// TestForwarderResetsItsOwnLostClaims: rows CLAIMED under this forwarder's
// own id that it is not working on (a claim whose commit it saw fail,
// though the commit went through) go back to PENDING on its next sweep and
// are forwarded, instead of waiting for StaleClaimAfter.
func TestForwarderResetsItsOwnLostClaims(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	em := newEmitter(t, db)
	id, err := em.Emit(ctx, db.Pool, noteEvent, noteV1{Text: "lost"}, events.Meta{AggregateID: "a"})
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, db.Q(`UPDATE /*schema*/tributary_outbox SET status = 'CLAIMED', claimed_by = 'me', claimed_at = $2 WHERE id = $1`),
		id, time.Now().Add(-time.Minute))
	require.NoError(t, err)
	pub := newWatchPublisher()
	f, err := events.NewForwarder(db.Pool, events.ForwarderConfig{Schema: db.Schema, Logger: pgtest.Logger(t), ID: "me",
		Publishers: []outbox.Publisher{pub}, SweepInterval: 100 * time.Millisecond})
	require.NoError(t, err)
	require.NoError(t, f.Start(ctx))
	t.Cleanup(func() { _ = f.Stop(context.Background()) })
	pgtest.WaitFor(t, 10*time.Second, "the lost claim forwarded", func() (bool, error) {
		return outboxRow(t, db, id).Status == events.StatusSent, nil
	})
	require.Equal(t, int64(1), f.Stats().StaleResets)
}
