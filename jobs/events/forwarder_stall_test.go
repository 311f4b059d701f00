package events_test

import (
	"context"
	"errors"
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
	"github.com/tributary-run/tributary/queue"
)

// statementCounter is a pgx tracer counting the statements and the
// transactions (BEGINs) a pool runs.
type statementCounter struct {
	statements, begins atomic.Int64
}

func (c *statementCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	c.statements.Add(1)
	if strings.HasPrefix(strings.ToLower(strings.TrimSpace(data.SQL)), "begin") {
		c.begins.Add(1)
	}
	return ctx
}

func (c *statementCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// tracedPool opens a small pool of its own on the test database whose
// statements are counted.
func tracedPool(t *testing.T) (*pgxpool.Pool, *statementCounter) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(pgtest.DatabaseURL())
	require.NoError(t, err)
	cfg.MaxConns = 4
	counter := &statementCounter{}
	cfg.ConnConfig.Tracer = counter
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool, counter
}

// acceptPublisher is a plain publisher that accepts everything.
type acceptPublisher struct{ calls atomic.Int64 }

func (p *acceptPublisher) Name() string { return "accept" }

func (p *acceptPublisher) PublishOutbox(ctx context.Context, evs []outbox.Event) error {
	p.calls.Add(1)
	return nil
}

// TestForwarderStuckAggregate leaves one row of aggregate "stuck" CLAIMED by
// a dead forwarder with 5,000 PENDING rows of the aggregate behind it, then
// emits one event without aggregate and one of aggregate "other": those two
// reach a real consumer through the bus within 2 s, and while nothing else
// is claimable the forwarder runs a bounded number of statements (no busy
// loop over the blocked backlog).
func TestForwarderStuckAggregate(t *testing.T) {
	t.Parallel()
	for _, withPlain := range []bool{false, true} {
		name := "BusOnly"
		if withPlain {
			name = "BusAndPlainPublisher"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			db := pgtest.New(t)
			ctx := context.Background()
			em := newEmitter(t, db)

			stuckID, err := em.Emit(ctx, db.Pool, noteEvent, noteV1{Text: "head"}, events.Meta{AggregateID: "stuck"})
			require.NoError(t, err)
			errKilled := errors.New("killed")
			dead, err := events.NewForwarder(db.Pool, events.ForwarderConfig{
				Schema: db.Schema, Publishers: []outbox.Publisher{&acceptPublisher{}}, ID: "dead", ClaimSize: 1,
				AfterClaimFunc: func(context.Context, []outbox.Event) error { return errKilled },
			})
			require.NoError(t, err)
			_, err = dead.ForwardOnce(ctx)
			require.ErrorIs(t, err, errKilled)
			require.Equal(t, events.StatusClaimed, outboxStatus(t, db, stuckID))

			const backlog = 5000
			for i := 0; i < backlog; i += 500 {
				batch := make([]events.Emission, 500)
				for j := range batch {
					batch[j] = events.Emission{Def: noteEvent, Payload: noteV1{Text: fmt.Sprint(i + j)}, Meta: events.Meta{AggregateID: "stuck"}}
				}
				_, err := em.EmitMany(ctx, db.Pool, batch)
				require.NoError(t, err)
			}
			freeID, err := em.Emit(ctx, db.Pool, noteEvent, noteV1{Text: "free"}, events.Meta{})
			require.NoError(t, err)
			otherID, err := em.Emit(ctx, db.Pool, noteEvent, noteV1{Text: "other"}, events.Meta{AggregateID: "other"})
			require.NoError(t, err)

			rec := &recorder{}
			c := fastConsumer(t, "stall-"+strings.ToLower(name), nil)
			events.On(c, noteEvent, func(ctx context.Context, m events.Message[noteV1]) error {
				rec.add(call{eventID: m.ID})
				return nil
			})
			var bus *events.Bus
			pgtest.StartRuntime(t, db, queue.RuntimeConfig{}, func(rt *queue.Runtime) {
				inst, err := events.Install(rt, events.InstallConfig{Consumers: []*events.Consumer{c}, NoForwarder: true})
				require.NoError(t, err)
				bus = inst.Bus
			})

			pool, counter := tracedPool(t)
			pubs := []outbox.Publisher{bus}
			if withPlain {
				pubs = append(pubs, &acceptPublisher{})
			}
			f, err := events.NewForwarder(pool, events.ForwarderConfig{
				Schema: db.Schema, Logger: pgtest.Logger(t), Publishers: pubs, ID: "live",
				SweepInterval: 200 * time.Millisecond,
			})
			require.NoError(t, err)
			started := time.Now()
			require.NoError(t, f.Start(ctx))
			t.Cleanup(func() { _ = f.Stop(context.Background()) })

			handled := func(id string) func(call) bool { return func(c call) bool { return c.eventID == id } }
			pgtest.WaitFor(t, 2*time.Second, "the unrelated events to reach the consumer", func() (bool, error) {
				return rec.count(handled(freeID)) == 1 && rec.count(handled(otherID)) == 1, nil
			})

			t.Logf("unrelated events handled %s after the forwarder started", time.Since(started).Round(time.Millisecond))

			// Nothing else is claimable now: count what the forwarder runs.
			const window = 3 * time.Second
			statements, begins := counter.statements.Load(), counter.begins.Load()
			stats := f.Stats()
			windowStart := time.Now()
			<-time.After(window) // a measurement window, not a synchronisation
			elapsed := time.Since(windowStart).Seconds()
			perSecond := float64(counter.statements.Load()-statements) / elapsed
			txPerSecond := float64(counter.begins.Load()-begins) / elapsed
			emptyPerSecond := float64(f.Stats().EmptyClaims-stats.EmptyClaims) / elapsed
			t.Logf("while nothing is claimable: %.1f statements/s, %.1f transactions/s (BEGINs), %.1f empty claims/s over %.1f s",
				perSecond, txPerSecond, emptyPerSecond, elapsed)
			require.Less(t, emptyPerSecond, 25.0, "empty claims per second (ForwarderStats)")
			require.Less(t, txPerSecond, 25.0, "claim transactions per second while nothing is claimable")
			require.Less(t, perSecond, 100.0, "statements per second while nothing is claimable")

			require.Equal(t, events.StatusClaimed, outboxStatus(t, db, stuckID), "the stuck head is left alone until its cut-off")
			var pendingStuck int
			require.NoError(t, db.Pool.QueryRow(ctx, db.Q(`SELECT count(*) FROM /*schema*/tributary_outbox WHERE aggregate_id = 'stuck' AND status = 'PENDING'`)).Scan(&pendingStuck))
			require.Equal(t, backlog, pendingStuck, "nothing of the stuck aggregate overtook its head")
		})
	}
}
