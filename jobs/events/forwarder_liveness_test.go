package events_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/jobs/events"
	"github.com/tributary-run/tributary/outbox"
)

// TestForwarderStaleByLiveness: the stale-claim reset returns the claims of
// a process whose heartbeat is older than LivenessTimeout at once, and
// falls back to StaleClaimAfter for a claimer without a process row (and
// for a live one, as a backstop).
func TestForwarderStaleByLiveness(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	em := newEmitter(t, db)
	now := time.Now().UTC()
	_, err := db.Pool.Exec(ctx, db.Q(`
        INSERT INTO /*schema*/tributary_process (id, hostname, pid, queues, started_at, heartbeat_at)
        VALUES ('dead-proc', 'h', 1, '{default}', $1, $2), ('live-proc', 'h', 2, '{default}', $1, $3)`),
		now.Add(-time.Hour), now.Add(-time.Minute), now)
	require.NoError(t, err)

	claims := []struct {
		by      string
		age     time.Duration
		isStale bool
	}{
		{"dead-proc", 0, true},                // heartbeat a minute old: dead
		{"live-proc", 0, false},               // heartbeat now
		{"live-proc", 10 * time.Minute, true}, // past StaleClaimAfter: the backstop
		{"no-proc", 0, false},                 // no process row: StaleClaimAfter
		{"no-proc", 10 * time.Minute, true},   // past StaleClaimAfter
		{"dead-proc", 10 * time.Minute, true}, // both
		{"live-proc", 4 * time.Minute, false}, // under StaleClaimAfter
		{"no-proc", 4*time.Minute + 59*time.Second, false},
	}
	ids := make([]string, len(claims))
	for i, c := range claims {
		ids[i], err = em.Emit(ctx, db.Pool, noteEvent, noteV1{Text: fmt.Sprint(i)}, events.Meta{})
		require.NoError(t, err)
		_, err = db.Pool.Exec(ctx, db.Q(`UPDATE /*schema*/tributary_outbox SET status = 'CLAIMED', claimed_by = $2, claimed_at = $3 WHERE id = $1`),
			ids[i], c.by, now.Add(-c.age))
		require.NoError(t, err)
	}
	f, err := events.NewForwarder(db.Pool, events.ForwarderConfig{Schema: db.Schema, Logger: pgtest.Logger(t), Publishers: []outbox.Publisher{newWatchPublisher()}})
	require.NoError(t, err)
	f.ResetStale(ctx)
	want := 0
	for i, c := range claims {
		st := outboxRow(t, db, ids[i])
		if c.isStale {
			want++
			require.Equal(t, events.StatusPending, st.Status, "claim %d by %s, %s old", i, c.by, c.age)
		} else {
			require.Equal(t, events.StatusClaimed, st.Status, "claim %d by %s, %s old", i, c.by, c.age)
		}
	}
	require.Equal(t, int64(want), f.Stats().StaleResets)
}

// TestInstallNamesClaimsByProcess: an installed forwarder claims under the
// runtime's River client id, the id of its tributary_process row.
func TestInstallNamesClaimsByProcess(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	rt, inst := startEvents(t, db, events.ForwarderConfig{})
	require.NotEmpty(t, rt.River().ID())
	require.Equal(t, rt.River().ID(), inst.Forwarder.ID())
}

// sqlWatcher is a pgx tracer counting the statements containing substr
// that ended.
type sqlWatcher struct {
	substr string
	ended  atomic.Int64
}

type watchedKey struct{}

func (w *sqlWatcher) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	return context.WithValue(ctx, watchedKey{}, strings.Contains(data.SQL, w.substr))
}

func (w *sqlWatcher) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryEndData) {
	if watched, _ := ctx.Value(watchedKey{}).(bool); watched {
		w.ended.Add(1)
	}
}

// watchedPool opens a small pool of its own whose statements containing
// substr are counted when they end.
func watchedPool(t *testing.T, substr string) (*pgxpool.Pool, *sqlWatcher) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(pgtest.DatabaseURL())
	require.NoError(t, err)
	cfg.MaxConns = 4
	w := &sqlWatcher{substr: substr}
	cfg.ConnConfig.Tracer = w
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool, w
}

// hangingPublisher blocks every publish until release is closed, ignoring
// its context, as a wedged client library would.
type hangingPublisher struct {
	entered chan struct{}
	release chan struct{}
	calls   atomic.Int64
}

func (p *hangingPublisher) Name() string { return "hanging" }

func (p *hangingPublisher) PublishOutbox(ctx context.Context, evs []outbox.Event) error {
	if p.calls.Add(1) == 1 {
		close(p.entered)
	}
	<-p.release
	return nil
}

// ctxPublisher blocks until its context ends.
type ctxPublisher struct{ entered chan struct{} }

func (p *ctxPublisher) Name() string { return "ctx-bound" }

func (p *ctxPublisher) PublishOutbox(ctx context.Context, evs []outbox.Event) error {
	select {
	case p.entered <- struct{}{}:
	default:
	}
	<-ctx.Done()
	return ctx.Err()
}

// TestForwarderStop: Stop waits for the batch in hand; past its deadline it
// releases this forwarder's claims (PENDING, unclaimed, no attempt
// charged), and a publish that returns later changes nothing.
func TestForwarderStop(t *testing.T) {
	t.Parallel()

	t.Run("PastDeadlineReleasesClaims", func(t *testing.T) {
		t.Parallel()
		db := pgtest.New(t)
		ctx := context.Background()
		ids := emitNotes(t, newEmitter(t, db), db, 20, 5, 20)
		pub := &hangingPublisher{entered: make(chan struct{}), release: make(chan struct{})}
		pool, watch := watchedPool(t, "AS u(id, kind, error, delivered, retry_at)") // the outcome statement
		f, err := events.NewForwarder(pool, events.ForwarderConfig{Schema: db.Schema, Logger: pgtest.Logger(t),
			Publishers: []outbox.Publisher{pub}, ID: "stopping", Concurrency: 1})
		require.NoError(t, err)
		require.NoError(t, f.Start(ctx))
		<-pub.entered
		for _, id := range ids {
			require.Equal(t, events.StatusClaimed, outboxStatus(t, db, id))
		}
		stopCtx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		err = f.Stop(stopCtx)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.ErrorContains(t, err, "released 20 claimed rows")
		for _, id := range ids {
			st := outboxRow(t, db, id)
			require.Equal(t, events.StatusPending, st.Status)
			require.Zero(t, st.Retries)
		}
		var claimed int
		require.NoError(t, db.Pool.QueryRow(ctx, db.Q(`SELECT count(*) FROM /*schema*/tributary_outbox WHERE claimed_by IS NOT NULL`)).Scan(&claimed))
		require.Zero(t, claimed)

		close(pub.release) // the wedged publish returns: its outcome must not land
		pgtest.WaitFor(t, 10*time.Second, "the abandoned batch to record its outcome", func() (bool, error) {
			return watch.ended.Load() == 1, nil
		})
		require.Zero(t, f.Stats().Forwarded)
		for _, id := range ids {
			require.Equal(t, events.StatusPending, outboxStatus(t, db, id), "a released row is not marked SENT by the old claim")
		}
	})

	t.Run("CancelledPublishIsNotCharged", func(t *testing.T) {
		t.Parallel()
		db := pgtest.New(t)
		ctx := context.Background()
		ids := emitNotes(t, newEmitter(t, db), db, 5, 5, 5)
		pub := &ctxPublisher{entered: make(chan struct{}, 1)}
		f, err := events.NewForwarder(db.Pool, events.ForwarderConfig{Schema: db.Schema, Logger: pgtest.Logger(t),
			Publishers: []outbox.Publisher{pub}, Concurrency: 1})
		require.NoError(t, err)
		require.NoError(t, f.Start(ctx))
		<-pub.entered
		stopCtx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		require.Error(t, f.Stop(stopCtx))
		pgtest.WaitFor(t, 10*time.Second, "the rows back to PENDING", func() (bool, error) {
			for _, id := range ids {
				if outboxStatus(t, db, id) != events.StatusPending {
					return false, nil
				}
			}
			return true, nil
		})
		for _, id := range ids {
			require.Zero(t, outboxRow(t, db, id).Retries, "a shutdown is not a failed attempt")
		}
	})

	t.Run("WaitsForTheBatch", func(t *testing.T) {
		t.Parallel()
		db := pgtest.New(t)
		ctx := context.Background()
		ids := emitNotes(t, newEmitter(t, db), db, 10, 5, 10)
		pub := &hangingPublisher{entered: make(chan struct{}), release: make(chan struct{})}
		f, err := events.NewForwarder(db.Pool, events.ForwarderConfig{Schema: db.Schema, Logger: pgtest.Logger(t),
			Publishers: []outbox.Publisher{pub}, Concurrency: 1})
		require.NoError(t, err)
		require.NoError(t, f.Start(ctx))
		<-pub.entered
		stopped := make(chan error, 1)
		go func() { stopped <- f.Stop(ctx) }()
		close(pub.release)
		require.NoError(t, <-stopped)
		for _, id := range ids {
			require.Equal(t, events.StatusSent, outboxStatus(t, db, id))
		}
	})
}
