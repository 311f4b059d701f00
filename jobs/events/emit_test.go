package events_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/jobs/events"
	"github.com/tributary-run/tributary/queue"
)

func TestEmitAtomicity(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		db  *pgtest.DB
		em  *events.Emitter
		rec *recorder
	}
	setup := func(t *testing.T) *testBundle {
		t.Helper()
		db := pgtest.New(t)
		rec := &recorder{}
		var consumers []*events.Consumer
		for _, name := range []string{"billing", "shipping"} {
			c := fastConsumer(t, name, nil)
			events.On(c, orderPlacedEvent, func(ctx context.Context, m events.Message[orderPlaced]) error {
				rec.add(call{consumer: m.Consumer, eventID: m.ID, correlation: events.CorrelationID(ctx), payload: m.Payload})
				return nil
			})
			consumers = append(consumers, c)
		}
		startEvents(t, db, events.ForwarderConfig{}, consumers...)
		return &testBundle{db: db, em: newEmitter(t, db), rec: rec}
	}

	t.Run("RolledBackNeverForwardedCommittedRunsOncePerConsumer", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ctx := context.Background()

		tx, err := b.db.Pool.Begin(ctx)
		require.NoError(t, err)
		rolledBack, err := b.em.EmitTx(ctx, tx, orderPlacedEvent, orderPlaced{OrderID: "rb", Amount: 1}, events.Meta{})
		require.NoError(t, err)
		require.NoError(t, tx.Rollback(ctx))

		var committed string
		require.NoError(t, pgx.BeginFunc(ctx, b.db.Pool, func(tx pgx.Tx) error {
			committed, err = b.em.EmitTx(ctx, tx, orderPlacedEvent, orderPlaced{OrderID: "ok", Amount: 2}, events.Meta{CorrelationID: "corr-1"})
			return err
		}))

		pgtest.WaitFor(t, 15*time.Second, "both consumers to handle the committed event", func() (bool, error) {
			return b.rec.count(nil) >= 2, nil
		})
		require.Equal(t, events.StatusSent, outboxStatus(t, b.db, committed))
		require.Empty(t, outboxStatus(t, b.db, rolledBack), "a rolled-back event must not exist")
		require.Equal(t, 1, countOutbox(t, b.db))

		// Quiesce: every dispatch job is finished, then count again.
		pgtest.WaitFor(t, 10*time.Second, "dispatch jobs to finish", func() (bool, error) {
			return b.db.CountJobs(t, "available", "running", "retryable", "pending") == 0, nil
		})
		calls := b.rec.snapshot()
		require.Len(t, calls, 2, "exactly once per consumer")
		got := map[string]bool{}
		for _, c := range calls {
			require.Equal(t, committed, c.eventID)
			require.Equal(t, "corr-1", c.correlation)
			require.Equal(t, orderPlaced{OrderID: "ok", Amount: 2}, c.payload)
			got[c.consumer] = true
		}
		require.Equal(t, map[string]bool{"billing": true, "shipping": true}, got)
	})
}

func TestEmitBadInput(t *testing.T) {
	t.Parallel()

	setup := func(t *testing.T) (*events.Emitter, *pgtest.DB) {
		t.Helper()
		db := pgtest.New(t)
		reg, err := events.NewRegistry(orderPlacedEvent)
		require.NoError(t, err)
		em, err := events.NewEmitter(events.EmitterConfig{Schema: db.Schema, Registry: reg, MaxPayloadBytes: 100})
		require.NoError(t, err)
		return em, db
	}

	t.Run("UnknownEventType", func(t *testing.T) {
		t.Parallel()
		em, db := setup(t)
		_, err := em.Emit(context.Background(), db.Pool, noteEvent, noteV1{Text: "x"}, events.Meta{})
		require.ErrorIs(t, err, events.ErrUnknownEventType)
		require.Contains(t, err.Error(), `"test.note"`)
		_, err = em.EmitJSON(context.Background(), db.Pool, "no.such", json.RawMessage(`{}`), events.Meta{})
		require.ErrorIs(t, err, events.ErrUnknownEventType)
		require.Contains(t, err.Error(), `"no.such"`)
		require.Zero(t, countOutbox(t, db))
	})

	t.Run("PayloadOverLimit", func(t *testing.T) {
		t.Parallel()
		em, db := setup(t)
		_, err := em.Emit(context.Background(), db.Pool, orderPlacedEvent, orderPlaced{OrderID: strings.Repeat("x", 200)}, events.Meta{})
		var tooLarge *events.PayloadTooLargeError
		require.True(t, errors.As(err, &tooLarge), "got %v", err)
		require.Equal(t, 100, tooLarge.Limit)
		require.Contains(t, err.Error(), "test.order_placed")
		require.Zero(t, countOutbox(t, db))
	})

	t.Run("DefaultLimitIsOneMiB", func(t *testing.T) {
		t.Parallel()
		db := pgtest.New(t)
		em := newEmitter(t, db)
		_, err := em.Emit(context.Background(), db.Pool, noteEvent, noteV1{Text: strings.Repeat("y", 1<<20)}, events.Meta{})
		var tooLarge *events.PayloadTooLargeError
		require.ErrorAs(t, err, &tooLarge)
		require.Equal(t, 1<<20, tooLarge.Limit)
		require.Zero(t, countOutbox(t, db))
	})

	t.Run("WrongPayloadTypeAndInvalidPayload", func(t *testing.T) {
		t.Parallel()
		em, db := setup(t)
		_, err := em.Emit(context.Background(), db.Pool, orderPlacedEvent, noteV1{}, events.Meta{})
		require.ErrorContains(t, err, "has type events_test.noteV1")
		_, err = em.Emit(context.Background(), db.Pool, orderPlacedEvent, orderPlaced{Amount: -1}, events.Meta{})
		require.ErrorContains(t, err, "amount must not be negative")
		_, err = em.EmitJSON(context.Background(), db.Pool, "test.order_placed", json.RawMessage(`{"order_id": 5}`), events.Meta{})
		require.ErrorContains(t, err, "does not fit")
		_, err = em.EmitJSON(context.Background(), db.Pool, "test.order_placed", json.RawMessage(`{"order_id": "a", "bogus": 1}`), events.Meta{})
		require.ErrorContains(t, err, `unknown field "bogus"`)
		_, err = em.EmitJSON(context.Background(), db.Pool, "test.order_placed", json.RawMessage(`{not json`), events.Meta{})
		require.ErrorContains(t, err, "not valid JSON")
		require.Zero(t, countOutbox(t, db))
	})

	// JSON that is valid but that Postgres's jsonb (or text) refuses must be
	// refused before the insert: an insert error would abort the caller's
	// transaction with a database error that names nothing.
	t.Run("NotStorableInPostgresKeepsTheTransaction", func(t *testing.T) {
		t.Parallel()
		em, db := setup(t)
		ctx := context.Background()
		ok := orderPlaced{OrderID: "ok"}
		for _, tc := range []struct {
			name    string
			emit    func(tx pgx.Tx) error
			mention string
		}{
			{"TypedNUL", func(tx pgx.Tx) error {
				_, err := em.EmitTx(ctx, tx, orderPlacedEvent, orderPlaced{OrderID: "a\x00b"}, events.Meta{})
				return err
			}, `\u0000`},
			{"RawNUL", func(tx pgx.Tx) error {
				_, err := em.EmitJSONTx(ctx, tx, "test.order_placed", json.RawMessage(`{"order_id":"\u0000"}`), events.Meta{})
				return err
			}, `\u0000`},
			{"RawLoneSurrogate", func(tx pgx.Tx) error {
				_, err := em.EmitJSONTx(ctx, tx, "test.order_placed", json.RawMessage(`{"order_id":"\ud800"}`), events.Meta{})
				return err
			}, "surrogate"},
			{"RawInvalidUTF8", func(tx pgx.Tx) error {
				_, err := em.EmitJSONTx(ctx, tx, "test.order_placed", json.RawMessage("{\"order_id\":\"\xff\"}"), events.Meta{})
				return err
			}, "UTF-8"},
			{"NULInMetadata", func(tx pgx.Tx) error {
				_, err := em.EmitTx(ctx, tx, orderPlacedEvent, ok, events.Meta{Extra: map[string]string{"k": "\x00"}})
				return err
			}, "metadata"},
			{"NULInAggregate", func(tx pgx.Tx) error {
				_, err := em.EmitTx(ctx, tx, orderPlacedEvent, ok, events.Meta{AggregateID: "a\x00"})
				return err
			}, "aggregate"},
		} {
			tx, err := db.Pool.Begin(ctx)
			require.NoError(t, err)
			err = tc.emit(tx)
			var notStorable *events.NotStorableError
			require.ErrorAs(t, err, &notStorable, tc.name)
			require.Equal(t, "test.order_placed", notStorable.EventType)
			require.ErrorIs(t, err, queue.ErrNotStorable, tc.name)
			require.ErrorContains(t, err, "test.order_placed", tc.name)
			require.ErrorContains(t, err, tc.mention, tc.name)
			_, err = tx.Exec(ctx, "SELECT 1")
			require.NoError(t, err, "%s: the caller's transaction is still usable", tc.name)
			require.NoError(t, tx.Rollback(ctx))
		}
		require.Zero(t, countOutbox(t, db))
	})

	t.Run("ManyIsAllOrNothing", func(t *testing.T) {
		t.Parallel()
		em, db := setup(t)
		_, err := em.EmitMany(context.Background(), db.Pool, []events.Emission{
			{Def: orderPlacedEvent, Payload: orderPlaced{OrderID: "a"}},
			{Def: orderPlacedEvent, Payload: orderPlaced{OrderID: strings.Repeat("x", 200)}},
		})
		require.ErrorContains(t, err, "event 1")
		require.Zero(t, countOutbox(t, db))
	})
}

func TestEmitWithoutNotify(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	rec := &recorder{}
	c := fastConsumer(t, "polled", nil)
	events.On(c, noteEvent, func(ctx context.Context, m events.Message[noteV1]) error {
		rec.add(call{eventID: m.ID})
		return nil
	})
	startEvents(t, db, events.ForwarderConfig{SweepInterval: 300 * time.Millisecond}, c)
	reg, err := events.NewRegistry(noteEvent)
	require.NoError(t, err)
	em, err := events.NewEmitter(events.EmitterConfig{Schema: db.Schema, Registry: reg, NoNotify: true})
	require.NoError(t, err)
	id, err := em.Emit(context.Background(), db.Pool, noteEvent, noteV1{Text: "polled"}, events.Meta{})
	require.NoError(t, err)
	pgtest.WaitFor(t, 15*time.Second, "the event to be found by polling", func() (bool, error) {
		return rec.count(func(c call) bool { return c.eventID == id }) == 1, nil
	})
}

// TestEmitPositionFollowsTheAggregateLock: a second emitter for an
// aggregate waits for the first one's commit before its row gets its
// position, so position order is commit order per aggregate. Emitter A
// holds aggregate X open; B, emitting for X on the pool (no transaction
// of the caller's), waits; C, for another aggregate, commits meanwhile.
// B's position must come after C's: had B's row been given its position
// before the wait, it would lie between A's and C's.
func TestEmitPositionFollowsTheAggregateLock(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	em := newEmitter(t, db)
	ctx := context.Background()

	txA, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = txA.Rollback(ctx) }()
	idA, err := em.EmitTx(ctx, txA, noteEvent, noteV1{Text: "a"}, events.Meta{AggregateID: "X"})
	require.NoError(t, err)

	type result struct {
		id  string
		err error
	}
	doneB := make(chan result, 1)
	go func() {
		id, err := em.Emit(ctx, db.Pool, noteEvent, noteV1{Text: "b"}, events.Meta{AggregateID: "X"})
		doneB <- result{id, err}
	}()
	pgtest.WaitFor(t, 10*time.Second, "the second emitter to wait for the aggregate's lock", func() (bool, error) {
		var waiting int
		err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted`).Scan(&waiting)
		return waiting > 0, err
	})
	idC, err := em.Emit(ctx, db.Pool, noteEvent, noteV1{Text: "c"}, events.Meta{AggregateID: "Y"})
	require.NoError(t, err)
	select {
	case r := <-doneB:
		t.Fatalf("the second emitter for X finished while the first held X: %v", r)
	default:
	}
	require.NoError(t, txA.Commit(ctx))
	r := <-doneB
	require.NoError(t, r.err)

	pos := func(id string) int64 {
		var p int64
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT position FROM `+pgx.Identifier{db.Schema}.Sanitize()+`.tributary_outbox WHERE id = $1`, id).Scan(&p))
		return p
	}
	require.Less(t, pos(idA), pos(idC))
	require.Less(t, pos(idC), pos(r.id), "B's position is taken after its wait for X's lock")
}
