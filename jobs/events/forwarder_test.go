package events_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/internal/servicetest"
	"github.com/tributary-run/tributary/jobs/events"
	"github.com/tributary-run/tributary/outbox"
	"github.com/tributary-run/tributary/queue"
)

// watchPublisher records every publish and notes when one event is in two
// publishes at the same time.
type watchPublisher struct {
	mu       sync.Mutex
	inFlight map[string]bool
	counts   map[string]int
	byAgg    map[string][]string // aggregate -> event ids in publish order
	overlaps []string
	failures atomic.Int64 // fail this many publishes first
}

func newWatchPublisher() *watchPublisher {
	return &watchPublisher{inFlight: map[string]bool{}, counts: map[string]int{}, byAgg: map[string][]string{}}
}

func (p *watchPublisher) Name() string { return "watch" }

func (p *watchPublisher) PublishOutbox(ctx context.Context, evs []outbox.Event) error {
	if p.failures.Add(-1) >= 0 {
		return errors.New("broker unavailable")
	}
	p.mu.Lock()
	for _, e := range evs {
		if p.inFlight[e.ID] {
			p.overlaps = append(p.overlaps, e.ID)
		}
		p.inFlight[e.ID] = true
	}
	p.mu.Unlock()
	time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond) // widen the window for overlaps
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, e := range evs {
		delete(p.inFlight, e.ID)
		p.counts[e.ID]++
		if e.AggregateID != "" {
			p.byAgg[e.AggregateID] = append(p.byAgg[e.AggregateID], e.ID)
		}
	}
	return nil
}

// emitPositions returns, per aggregate, the event ids in emit order.
func emitOrder(t *testing.T, db *pgtest.DB) map[string][]string {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), db.Q(`
        SELECT aggregate_id, id::text FROM /*schema*/tributary_outbox WHERE aggregate_id IS NOT NULL ORDER BY position`))
	require.NoError(t, err)
	defer rows.Close()
	out := map[string][]string{}
	for rows.Next() {
		var agg, id string
		require.NoError(t, rows.Scan(&agg, &id))
		out[agg] = append(out[agg], id)
	}
	require.NoError(t, rows.Err())
	return out
}

func emitNotes(t *testing.T, em *events.Emitter, db *pgtest.DB, n, aggregates, perTx int) []string {
	t.Helper()
	ctx := context.Background()
	var ids []string
	for i := 0; i < n; i += perTx {
		batch := make([]events.Emission, 0, perTx)
		for j := i; j < min(n, i+perTx); j++ {
			meta := events.Meta{}
			if j%10 != 9 { // every tenth event has no aggregate
				meta.AggregateID = fmt.Sprintf("agg-%d", j%aggregates)
			}
			batch = append(batch, events.Emission{Def: noteEvent, Payload: noteV1{Text: fmt.Sprint(j)}, Meta: meta})
		}
		got, err := em.EmitMany(ctx, db.Pool, batch)
		require.NoError(t, err)
		ids = append(ids, got...)
	}
	return ids
}

func TestForwarderConcurrentClaims(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	em := newEmitter(t, db)
	pub := newWatchPublisher()
	const n = 1500
	ids := emitNotes(t, em, db, n, 40, 50)

	var forwarders []*events.Forwarder
	for i := range 4 {
		f, err := events.NewForwarder(db.Pool, events.ForwarderConfig{
			Schema: db.Schema, Logger: pgtest.Logger(t), Publishers: []outbox.Publisher{pub},
			ID: fmt.Sprintf("fwd-%d", i), ClaimSize: 25, SweepInterval: 50 * time.Millisecond,
		})
		require.NoError(t, err)
		forwarders = append(forwarders, f)
	}
	ctx := context.Background()
	for _, f := range forwarders {
		require.NoError(t, f.Start(ctx))
		t.Cleanup(func() { _ = f.Stop(context.Background()) })
	}
	// More events while they run, so claims race with inserts too.
	ids = append(ids, emitNotes(t, em, db, 500, 40, 7)...)

	pgtest.WaitFor(t, 60*time.Second, "every row to be SENT", func() (bool, error) {
		var left int
		err := db.Pool.QueryRow(ctx, db.Q(`SELECT count(*) FROM /*schema*/tributary_outbox WHERE status <> 'SENT'`)).Scan(&left)
		return left == 0, err
	})
	pub.mu.Lock()
	defer pub.mu.Unlock()
	require.Empty(t, pub.overlaps, "a row was claimed by two forwarders at once")
	for _, id := range ids {
		require.Equal(t, 1, pub.counts[id], "event %s published once", id)
	}
	var total int64
	for _, f := range forwarders {
		total += f.Stats().Forwarded
	}
	require.Equal(t, int64(len(ids)), total)
	require.Equal(t, emitOrder(t, db), pub.byAgg, "each aggregate's events are published in emit order")
}

func TestForwarderFailures(t *testing.T) {
	t.Parallel()

	t.Run("RetriesThenFailedThenReplay", func(t *testing.T) {
		t.Parallel()
		db := pgtest.New(t)
		em := newEmitter(t, db)
		pub := newWatchPublisher()
		pub.failures.Store(3)
		f, err := events.NewForwarder(db.Pool, events.ForwarderConfig{
			Schema: db.Schema, Logger: pgtest.Logger(t), Publishers: []outbox.Publisher{pub},
			MaxRetries: 2, SweepInterval: 20 * time.Millisecond,
			RetryBackoffMin: time.Microsecond, // retried at once: this test is about the counting, not the wait
		})
		require.NoError(t, err)
		ctx := context.Background()
		id, err := em.Emit(ctx, db.Pool, noteEvent, noteV1{Text: "x"}, events.Meta{})
		require.NoError(t, err)

		_, err = f.ForwardOnce(ctx)
		require.ErrorContains(t, err, "broker unavailable")
		rows, err := events.ListOutbox(ctx, db.Pool, db.Schema, events.ListParams{})
		require.NoError(t, err)
		require.Equal(t, events.StatusPending, rows[0].Status)
		require.Equal(t, 1, rows[0].RetryCount)
		require.Contains(t, rows[0].LastError, "broker unavailable")

		_, err = f.ForwardOnce(ctx)
		require.Error(t, err)
		rows, err = events.ListOutbox(ctx, db.Pool, db.Schema, events.ListParams{Status: events.StatusFailed})
		require.NoError(t, err)
		require.Len(t, rows, 1)
		require.Equal(t, id, rows[0].ID)
		require.NotNil(t, rows[0].FailedAt)

		_, err = events.ReplayOutbox(ctx, db.Pool, db.Schema, []string{id, "00000000-0000-0000-0000-000000000000"})
		require.ErrorIs(t, err, events.ErrNotReplayable, "an unknown id fails the whole replay")
		require.Equal(t, events.StatusFailed, outboxStatus(t, db, id))
		_, err = events.ReplayOutbox(ctx, db.Pool, db.Schema, []string{"nope"})
		require.ErrorContains(t, err, `invalid outbox id "nope"`)

		n, err := events.ReplayFailed(ctx, db.Pool, db.Schema)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		require.Equal(t, events.StatusPending, outboxStatus(t, db, id))
		_, err = f.ForwardOnce(ctx) // the third publish fails again
		require.Error(t, err)
		_, err = f.ForwardOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, events.StatusSent, outboxStatus(t, db, id))
	})

	t.Run("StaleClaimIsResetAndForwarded", func(t *testing.T) {
		t.Parallel()
		db := pgtest.New(t)
		em := newEmitter(t, db)
		ctx := context.Background()
		ids := emitNotes(t, em, db, 30, 5, 30)

		// A forwarder that "dies" right after its claim committed: it never
		// publishes, never marks anything.
		errKilled := errors.New("killed")
		dead, err := events.NewForwarder(db.Pool, events.ForwarderConfig{
			Schema: db.Schema, Publishers: []outbox.Publisher{newWatchPublisher()}, ID: "dead",
			AfterClaimFunc: func(ctx context.Context, evs []outbox.Event) error { return errKilled },
		})
		require.NoError(t, err)
		_, err = dead.ForwardOnce(ctx)
		require.ErrorIs(t, err, errKilled)
		rows, err := events.ListOutbox(ctx, db.Pool, db.Schema, events.ListParams{Status: events.StatusClaimed})
		require.NoError(t, err)
		require.Len(t, rows, 30)
		require.Equal(t, "dead", rows[0].ClaimedBy)

		rec := &recorder{}
		c := fastConsumer(t, "after-crash", nil)
		events.On(c, noteEvent, func(ctx context.Context, m events.Message[noteV1]) error {
			rec.add(call{eventID: m.ID})
			return nil
		})
		_, inst := startEvents(t, db, events.ForwarderConfig{StaleClaimAfter: 300 * time.Millisecond, SweepInterval: 50 * time.Millisecond}, c)
		pgtest.WaitFor(t, 20*time.Second, "the stale rows to be forwarded and handled", func() (bool, error) {
			return rec.count(nil) == len(ids), nil
		})
		for _, id := range ids {
			require.Equal(t, events.StatusSent, outboxStatus(t, db, id))
		}
		require.Positive(t, inst.Forwarder.Stats().StaleResets)
	})
}

// spreadOutbox is a new schema holding n PENDING notes over aggregates
// agg-0 ..., the i-th of agg-(i mod aggregates), and a forwarder (not
// started) claiming claimSize at a time.
func spreadOutbox(t *testing.T, n, aggregates, claimSize int) (*pgtest.DB, *events.Forwarder) {
	t.Helper()
	db := pgtest.New(t)
	items := make([]events.Emission, n)
	for i := range items {
		items[i] = events.Emission{Def: noteEvent, Payload: noteV1{Text: "x"}, Meta: events.Meta{AggregateID: fmt.Sprintf("agg-%d", i%aggregates)}}
	}
	_, err := newEmitter(t, db).EmitMany(context.Background(), db.Pool, items)
	require.NoError(t, err)
	f, err := events.NewForwarder(db.Pool, events.ForwarderConfig{Schema: db.Schema, ClaimSize: claimSize, Publishers: []outbox.Publisher{&watchPublisher{}}})
	require.NoError(t, err)
	return db, f
}

// TestClaimLocksOnlyItsCandidates claims 10 rows of an outbox holding 2,000
// PENDING rows of 2,000 aggregates, in a schema without statistics (the
// state in which Postgres planned the claim as scan, filter, then sort): the
// claim may take at most one advisory lock per row it looks at, not one per
// aggregate of the backlog.
func TestClaimLocksOnlyItsCandidates(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, f := spreadOutbox(t, 2000, 2000, 10)
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	ids, candidates, err := f.SelectClaim(ctx, tx)
	require.NoError(t, err)
	require.Len(t, ids, 10)
	require.Equal(t, 10, candidates)
	var locks int
	require.NoError(t, tx.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()`).Scan(&locks))
	require.Equal(t, 10, locks, "one advisory lock per claimed aggregate")
}

// TestClaimUpdateGoesByPrimaryKey: the claim's update (here the SENT mark
// of the one-transaction path) reaches its rows through the primary key,
// whatever the PENDING backlog behind them. Written with a plain
// status = 'PENDING', the update matched the PENDING index's predicate, and
// on an outbox without statistics Postgres walked that whole index,
// fetching every PENDING row to compare its id with the batch's: in bench
// events it passed over 20 rows a row it marked: 3.2 s of the statement's
// 7.0 s in a run.
func TestClaimUpdateGoesByPrimaryKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, f := spreadOutbox(t, 3000, 100, 100)
	plan, err := f.ExplainClaimUpdate(ctx, pendingIDs(t, db, 100))
	require.NoError(t, err)
	require.Contains(t, plan, "Index Scan using tributary_outbox_pkey on tributary_outbox o", plan)
	require.NotContains(t, plan, "tributary_outbox_pending_idx on tributary_outbox o", plan)
	require.NotContains(t, plan, "Seq Scan on tributary_outbox", plan)
}

// TestClaimGuardLooksOnceAnAggregate: the claim update's ordering guard
// (no earlier unfinished row of the aggregate outside the batch) reads an
// aggregate's earlier rows once per aggregate of the batch, not once per row.
// Checked per row, a batch of 300 rows of one hot aggregate read the rows
// before each of them: about 45,000 index entries and their heap rows for 300
// marks, the forward round growing with the square of a hot lane's backlog.
func TestClaimGuardLooksOnceAnAggregate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, f := spreadOutbox(t, 600, 1, 300)
	plan, err := f.ExplainAnalyzeClaimUpdate(ctx, pendingIDs(t, db, 300), "ANALYZE, COSTS OFF, FORMAT JSON", nil)
	require.NoError(t, err)
	marked, guard := 0.0, 0.0
	walkPlan(t, plan, func(n planNode) {
		if n["Relation Name"] == "tributary_outbox" && n["Alias"] == "e" {
			guard += (n.num("Actual Rows") + n.num("Rows Removed by Filter") + n.num("Rows Removed by Index Recheck")) * n.num("Actual Loops")
		}
		if n["Node Type"] == "ModifyTable" {
			marked = n.num("Actual Rows")
		}
	})
	require.Equal(t, 300.0, marked, "every row of the batch is marked: nothing of the aggregate lies before it")
	require.LessOrEqual(t, guard, 2*300.0, "rows the guard read for a batch of 300 rows of one aggregate:\n%s", plan)
}

// TestClaimGuardFloorGoesByItsIndexes: the claim update's ordering guard
// starts at the lowest unfinished position (its floor), which it reads
// through the PENDING and the CLAIMED rows' indexes, on an outbox whose rows
// are mostly SENT, without statistics and with them. Written as
// min(position), the CLAIMED rows' part was planned as a walk of the
// position index from its start, over every SENT row, until the first
// CLAIMED one: 40,000 rows and 44 ms of every claim in bench events.
func TestClaimGuardFloorGoesByItsIndexes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, f := spreadOutbox(t, 10000, 1000, 1000)
	_, err := db.Pool.Exec(ctx, db.Q(`UPDATE /*schema*/tributary_outbox SET status = 'SENT', sent_at = now()
WHERE position <= (SELECT min(position) + 7000 FROM /*schema*/tributary_outbox)`))
	require.NoError(t, err)
	for _, analyze := range []bool{false, true} {
		if analyze {
			_, err = db.Pool.Exec(ctx, db.Q(`ANALYZE /*schema*/tributary_outbox`))
			require.NoError(t, err)
		}
		plan, err := f.ExplainClaimUpdate(ctx, pendingIDs(t, db, 1000))
		require.NoError(t, err)
		require.Contains(t, plan, "Index Scan using tributary_outbox_pkey on tributary_outbox o", "analyzed: %v\n%s", analyze, plan)
		require.NotContains(t, plan, "tributary_outbox_position_idx", "analyzed: %v\n%s", analyze, plan)
		require.NotContains(t, plan, "Seq Scan on tributary_outbox", "analyzed: %v\n%s", analyze, plan)
	}
}

// TestClaimUpdatePlanMadeOnASmallOutbox: the claim's update runs with its
// generic plan, which a connection makes once, on the outbox as it is then:
// on a forwarder's earliest rounds, a few rows. Here the plan is made on an
// outbox of 10 rows and run after 20,000 SENT rows (below the batch, as the
// rows sent before it) and 5,000 PENDING ones (after it) were written,
// without statistics and with them: it must still mark the batch through
// the primary key and read the guard's floor and each aggregate's gap
// through their indexes, a few blocks a row, not walk what was sent.
func TestClaimUpdatePlanMadeOnASmallOutbox(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, f := spreadOutbox(t, 10, 5, 10)
	ids := pendingIDs(t, db, 10)
	for _, analyze := range []bool{false, true} {
		plan, err := f.ExplainAnalyzeClaimUpdate(ctx, ids, "ANALYZE, BUFFERS, COSTS OFF, FORMAT JSON", func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, db.Q(`
INSERT INTO /*schema*/tributary_outbox (id, position, event_type, event_version, event_kind, aggregate_id, payload, metadata, source_service, status, retry_count, created_at, sent_at)
OVERRIDING SYSTEM VALUE
SELECT gen_random_uuid(), -i, 'note', 1, 'domain', 'agg-' || (i % 1000), '{}', '{}', '', 'SENT', 0, now(), now() FROM generate_series(1, 20000) AS i;
INSERT INTO /*schema*/tributary_outbox (id, event_type, event_version, event_kind, aggregate_id, payload, metadata, source_service, status, retry_count, created_at)
SELECT gen_random_uuid(), 'note', 1, 'domain', 'agg-' || (i % 1000), '{}', '{}', '', 'PENDING', 0, now() FROM generate_series(1, 5000) AS i`))
			if err == nil && analyze {
				_, err = tx.Exec(ctx, db.Q(`ANALYZE /*schema*/tributary_outbox`))
			}
			return err
		})
		require.NoError(t, err)
		marked, blocks := 0.0, 0.0
		walkPlan(t, plan, func(n planNode) {
			if n["Node Type"] == "ModifyTable" {
				marked = n.num("Actual Rows")
			} else if n["Relation Name"] == "tributary_outbox" {
				blocks += n.num("Shared Hit Blocks") + n.num("Shared Read Blocks")
			}
		})
		require.Equal(t, 10.0, marked, "analyzed: %v: the whole batch is marked\n%s", analyze, plan)
		require.LessOrEqual(t, blocks, 100.0, "analyzed: %v: blocks the scans of a 10-row batch's update read\n%s", analyze, plan)
	}
}

// pendingIDs returns the ids of the outbox's first n PENDING rows in emit
// order.
func pendingIDs(t *testing.T, db *pgtest.DB, n int) []string {
	t.Helper()
	ids, err := pgx.CollectRows(mustQuery(t, db, `SELECT id::text FROM /*schema*/tributary_outbox WHERE status = 'PENDING' ORDER BY position LIMIT $1`, n), pgx.RowTo[string])
	require.NoError(t, err)
	return ids
}

func mustQuery(t *testing.T, db *pgtest.DB, sql string, args ...any) pgx.Rows {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), db.Q(sql), args...)
	require.NoError(t, err)
	return rows
}

// TestClaimSharesRunTogether: with 100 aggregates of two PENDING rows each
// (every aggregate once, then again), two forward loops claim at the same
// time, each in its share of the aggregates. Without shares the second
// loop's candidates were the first loop's aggregates, whose advisory locks
// the first held until it committed: it claimed nothing, and ordered events
// were forwarded one batch at a time.
func TestClaimSharesRunTogether(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, f := spreadOutbox(t, 200, 100, 100)
	aggregates := func(ids []string) map[string]bool {
		rows, err := db.Pool.Query(ctx, db.Q(`SELECT aggregate_id FROM /*schema*/tributary_outbox WHERE id = ANY($1::uuid[])`), ids)
		require.NoError(t, err)
		aggs, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		set := map[string]bool{}
		for _, a := range aggs {
			set[a] = true
		}
		return set
	}
	var claimed []map[string]bool
	for share := range 2 {
		tx, err := db.Pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		ids, _, err := f.SelectClaimShare(ctx, tx, share, 2)
		require.NoError(t, err)
		require.NotEmpty(t, ids, "loop %d claims while the other holds its batch", share)
		claimed = append(claimed, aggregates(ids))
	}
	for a := range claimed[0] {
		require.False(t, claimed[1][a], "aggregate %s claimed by both loops", a)
	}
	require.Equal(t, 100, len(claimed[0])+len(claimed[1]), "together the loops claim every aggregate")
}

func TestServiceContract(t *testing.T) {
	t.Parallel()
	servicetest.Run(t, "events.Forwarder", func(t *testing.T) (queue.Service, error) {
		db := pgtest.New(t)
		return events.NewForwarder(db.Pool, events.ForwarderConfig{Schema: db.Schema, Logger: pgtest.Logger(t), Publishers: []outbox.Publisher{newWatchPublisher()}})
	})
	servicetest.Run(t, "events.Dispatcher", func(t *testing.T) (queue.Service, error) {
		c := fastConsumer(t, "contract", nil)
		events.On(c, noteEvent, func(ctx context.Context, m events.Message[noteV1]) error { return nil })
		db := pgtest.New(t)
		return events.NewDispatcher(db.Pool, events.DispatcherConfig{Schema: db.Schema, Logger: pgtest.Logger(t), Consumers: []*events.Consumer{c}})
	})
}
