package events_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/jobs/events"
	"github.com/tributary-run/tributary/outbox"
	"github.com/tributary-run/tributary/queue"
)

// planSettings are the planner settings the bus changes for its own
// statements, as a transaction sees them.
type planSettings struct {
	PlanCacheMode, SeqScan, HashJoin, MergeJoin string
}

func readPlanSettings(ctx context.Context, tx pgx.Tx) (planSettings, error) {
	var s planSettings
	err := tx.QueryRow(ctx, `SELECT current_setting('plan_cache_mode'), current_setting('enable_seqscan'),
       current_setting('enable_hashjoin'), current_setting('enable_mergejoin')`).Scan(&s.PlanCacheMode, &s.SeqScan, &s.HashJoin, &s.MergeJoin)
	return s, err
}

// settingsProbe is a transactional publisher that records the planner
// settings of the transaction it is handed.
type settingsProbe struct {
	mu   sync.Mutex
	seen []planSettings
}

func (p *settingsProbe) Name() string { return "settings-probe" }

func (p *settingsProbe) PublishOutbox(context.Context, []outbox.Event) error {
	return errors.New("not used")
}

func (p *settingsProbe) PublishOutboxTx(ctx context.Context, tx pgx.Tx, _ []outbox.Event) (func(context.Context), error) {
	s, err := readPlanSettings(ctx, tx)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	p.seen = append(p.seen, s)
	p.mu.Unlock()
	return nil, nil
}

var _ outbox.TxPublisher = (*settingsProbe)(nil)

// noteBus is the bus of a runtime on db with one consumer of noteEvent.
func noteBus(t *testing.T, db *pgtest.DB) *events.Bus {
	t.Helper()
	c := fastConsumer(t, "plans", nil)
	events.On(c, noteEvent, func(context.Context, events.Message[noteV1]) error { return nil })
	var bus *events.Bus
	pgtest.StartRuntime(t, db, queue.RuntimeConfig{}, func(rt *queue.Runtime) {
		inst, err := events.Install(rt, events.InstallConfig{Consumers: []*events.Consumer{c}, NoForwarder: true})
		require.NoError(t, err)
		bus = inst.Bus
	})
	return bus
}

// TestTxPublishersBesideTheBusKeepThePlanSettings: the bus runs its own
// statements with generic plans and sequential scans, hash joins and merge
// joins off (genericPlanSQL), set for the rest of the forward round's
// transaction. A transactional publisher of the user's, after the bus (as
// Install puts it) or before it, is handed the transaction as the
// forwarder plans it for publishers: custom plans, every scan and join
// allowed, not the bus's settings, which would plan its own statements
// without sequential scans or hash joins.
func TestTxPublishersBesideTheBusKeepThePlanSettings(t *testing.T) {
	t.Parallel()
	for _, busFirst := range []bool{true, false} {
		t.Run(map[bool]string{true: "after the bus", false: "before the bus"}[busFirst], func(t *testing.T) {
			t.Parallel()
			db := pgtest.New(t)
			ctx := context.Background()
			bus := noteBus(t, db)
			probe := &settingsProbe{}
			pubs := []outbox.Publisher{bus, probe}
			if !busFirst {
				pubs = []outbox.Publisher{probe, bus}
			}
			f, err := events.NewForwarder(db.Pool, events.ForwarderConfig{Schema: db.Schema, Logger: pgtest.Logger(t), Publishers: pubs})
			require.NoError(t, err)
			ids, err := newEmitter(t, db).EmitMany(ctx, db.Pool, []events.Emission{
				{Def: noteEvent, Payload: noteV1{Text: "with an aggregate"}, Meta: events.Meta{AggregateID: "A"}},
				{Def: noteEvent, Payload: noteV1{Text: "without"}},
			})
			require.NoError(t, err)
			_, err = f.ForwardOnce(ctx)
			require.NoError(t, err)
			for _, id := range ids {
				require.Equal(t, events.StatusSent, outboxRow(t, db, id).Status)
			}
			want := planSettings{PlanCacheMode: "force_custom_plan", SeqScan: "on", HashJoin: "on", MergeJoin: "on"}
			require.Equal(t, []planSettings{want}, probe.seen)
		})
	}
}

// TestBusPublishOutboxTxRestoresPlanSettings: Bus.PublishOutboxTx, which
// the AMQP bridge's EventInserter calls in its inserting transaction,
// leaves the caller's transaction with the planner settings it had.
func TestBusPublishOutboxTxRestoresPlanSettings(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	bus := noteBus(t, db)
	evs := []outbox.Event{
		{ID: "0193a7b2-0000-7000-8000-000000000001", EventType: noteEvent.Name(), EventVersion: 1, EventKind: "domain", AggregateID: "A", Payload: []byte(`{"text":"a"}`)},
		{ID: "0193a7b2-0000-7000-8000-000000000002", EventType: noteEvent.Name(), EventVersion: 1, EventKind: "domain", Payload: []byte(`{"text":"b"}`)},
	}
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	// One of them set for the transaction by the caller, the rest as the
	// session has them.
	_, err = tx.Exec(ctx, `SET LOCAL enable_mergejoin = off`)
	require.NoError(t, err)
	before, err := readPlanSettings(ctx, tx)
	require.NoError(t, err)
	require.Equal(t, planSettings{PlanCacheMode: "auto", SeqScan: "on", HashJoin: "on", MergeJoin: "off"}, before)
	_, err = bus.PublishOutboxTx(ctx, tx, evs)
	require.NoError(t, err)
	after, err := readPlanSettings(ctx, tx)
	require.NoError(t, err)
	require.Equal(t, before, after)
	var jobs int
	require.NoError(t, tx.QueryRow(ctx, db.Q(`SELECT count(*) FROM /*schema*/river_job WHERE kind = 'tributary.event.dispatch'`)).Scan(&jobs))
	require.Equal(t, 2, jobs, "the bus's dispatch jobs are in the transaction")
}
