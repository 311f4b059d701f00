package amqpinbox_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/amqpbridge"
	"github.com/tributary-run/tributary/internal/amqptest"
	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/jobs/inbox"
	"github.com/tributary-run/tributary/jobs/inbox/amqpinbox"
	"github.com/tributary-run/tributary/queue"
)

type testBundle struct {
	db  *pgtest.DB
	ch  *amqp.Channel
	in  *amqpbridge.Inbound
	ib  *inbox.Inbox
	mu  sync.Mutex
	got []inbox.Message
}

func (b *testBundle) handled() []inbox.Message {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]inbox.Message(nil), b.got...)
}

// writers are the two ways the bridge writes an inbox's batches, each test
// run with both: Inserter in the bridge's transaction, Statements in one
// round trip.
var writers = []string{"Inserter", "Statements"}

// setup runs an inbound bridge on a fresh queue whose batches go to an
// inbox through Inserter or Statements (writer; wrapped by wrap or
// wrapStatements, when given), and a runtime that runs the inbox with a
// handler recording every message.
func setup(t *testing.T, writer string, wrap func(amqpbridge.InsertBatchFunc) amqpbridge.InsertBatchFunc,
	wrapStatements func(amqpbridge.InsertStatementsFunc) amqpbridge.InsertStatementsFunc) *testBundle {
	t.Helper()
	b := &testBundle{db: pgtest.New(t), ch: amqptest.Channel(t, amqptest.Conn(t))}
	var err error
	b.ib, err = inbox.New(inbox.Config{Name: "amqp-orders", HandleFunc: func(_ context.Context, m *inbox.Message) error {
		c := *m
		c.Body = bytes.Clone(m.Body)
		b.mu.Lock()
		b.got = append(b.got, c)
		b.mu.Unlock()
		return nil
	}})
	require.NoError(t, err)
	pgtest.StartRuntime(t, b.db, queue.RuntimeConfig{}, func(rt *queue.Runtime) {
		require.NoError(t, inbox.Install(rt, b.ib))
	})

	ic := amqpbridge.InboundConfig{Queue: amqptest.UniqueName("inbox"), DB: b.db.Pool, Prefetch: 20, Concurrency: 2}
	switch writer {
	case "Inserter":
		ic.Insert = amqpinbox.Inserter(b.ib, b.db.Schema, b.db.Pool)
		if wrap != nil {
			ic.Insert = wrap(ic.Insert)
		}
	case "Statements":
		ic.InsertStatements = amqpinbox.Statements(b.ib, b.db.Schema)
		if wrapStatements != nil {
			ic.InsertStatements = wrapStatements(ic.InsertStatements)
		}
	default:
		t.Fatalf("unknown writer %q", writer)
	}
	cfg := amqpbridge.Config{URL: amqptest.URL(), ConnectionName: amqptest.UniqueName("amqpinbox"), Logger: pgtest.Logger(t),
		RetryBase: 50 * time.Millisecond, RetryMax: 200 * time.Millisecond}
	b.in, err = amqpbridge.NewInbound(cfg, ic)
	require.NoError(t, err)
	topo := b.in.Topology()
	t.Cleanup(func() {
		names := []string{topo.Main, topo.Failed}
		for _, r := range topo.Retry {
			names = append(names, r.Queue)
		}
		for _, n := range names {
			_, _ = b.ch.QueueDelete(n, false, false, false)
		}
	})
	require.NoError(t, b.in.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = b.in.Stop(ctx)
	})
	return b
}

func (b *testBundle) publish(t *testing.T, p amqp.Publishing) {
	t.Helper()
	require.NoError(t, b.ch.PublishWithContext(context.Background(), "", b.in.Topology().Main, false, false, p))
}

// TestInserter: messages published to a real RabbitMQ queue reach the
// inbox's handler once each with every field intact, through one inbox
// batch per inserting transaction; a message PostgreSQL cannot hold goes to
// .failed alone; everything else is acked.
func TestInserter(t *testing.T) {
	t.Parallel()
	for _, writer := range writers {
		t.Run(writer, func(t *testing.T) {
			t.Parallel()
			testInserter(t, setup(t, writer, nil, nil))
		})
	}
}

func testInserter(t *testing.T, b *testBundle) {
	at := time.Unix(1764741600, 0)
	binary := []byte{0, 0xff, 0x80, 0xfe, '\n'}
	const n = 40
	for i := range n {
		p := amqp.Publishing{MessageId: fmt.Sprintf("m-%d", i), Type: "order.placed", ContentType: "application/json",
			Body: fmt.Appendf(nil, `{"n":%d}`, i)}
		switch i {
		case 3:
			p.CorrelationId, p.Timestamp, p.ContentType, p.Body = "c-3", at, "application/octet-stream", binary
			p.Headers = amqp.Table{"s": "é", "i": int32(7), "f": 2.5, "b": true, "t": at, "raw": []byte("xy"),
				"nested": amqp.Table{"list": []any{int64(1), "two"}}, "dec": amqp.Decimal{Scale: 1, Value: 15}}
		case 20:
			b.publish(t, amqp.Publishing{MessageId: "bad", Headers: amqp.Table{"s": "not utf-8 \xff"}, Body: []byte("x")})
		}
		b.publish(t, p)
	}
	failed := amqptest.Get(t, b.ch, b.in.Topology().Failed, 20*time.Second)
	require.Equal(t, "bad", failed.MessageId)
	require.Contains(t, failed.Headers[amqpbridge.HeaderFailureReason], `header "s": invalid UTF-8`)

	pgtest.WaitFor(t, 20*time.Second, "every message handled", func() (bool, error) {
		return len(b.handled()) == n, nil
	})
	amqptest.Eventually(t, 10*time.Second, "everything acked", func() bool {
		return amqptest.Depth(t, b.ch, b.in.Topology().Main) == 0 && b.in.Stats().HandedOff == n
	})
	seen := map[string]inbox.Message{}
	for _, m := range b.handled() {
		_, dup := seen[m.ID]
		require.False(t, dup, "message %s handled twice", m.ID)
		seen[m.ID] = m
		require.Equal(t, b.in.Topology().Main, m.Source)
		require.Equal(t, b.in.Topology().Main, m.RoutingKey, "published to the default exchange")
		require.Equal(t, "order.placed", m.Type)
	}
	require.Len(t, seen, n)
	require.Equal(t, `{"n":39}`, string(seen["m-39"].Body))
	m3 := seen["m-3"]
	require.Equal(t, binary, m3.Body, "a binary body, byte for byte")
	require.Equal(t, "c-3", m3.CorrelationID)
	require.Equal(t, "application/octet-stream", m3.ContentType)
	require.True(t, at.Equal(m3.Timestamp))
	require.Equal(t, map[string]any{"s": "é", "i": int64(7), "f": 2.5, "b": true, "t": at.UTC().Format(time.RFC3339), "raw": "eHk=",
		"nested": map[string]any{"list": []any{int64(1), "two"}}, "dec": 1.5}, m3.Headers)
	require.Nil(t, seen["m-0"].Headers)

	var rows, jobs int
	ctx := context.Background()
	require.NoError(t, b.db.Pool.QueryRow(ctx, b.db.Q(`SELECT count(*) FROM /*schema*/river_job WHERE kind = $1`), inbox.BatchKind).Scan(&jobs))
	require.Less(t, jobs, n, "batches, not a job per message")
	pgtest.WaitFor(t, 10*time.Second, "every batch row deleted", func() (bool, error) {
		err := b.db.Pool.QueryRow(ctx, b.db.Q(`SELECT count(*) FROM /*schema*/tributary_inbox_batch`)).Scan(&rows)
		return rows == 0, err
	})
}

// TestInserterAcksOnlyAfterCommit: a transaction that fails after the
// inbox batch was written rolls it back and acks nothing; the broker
// redelivers, and every message is handled once. With Statements the
// failure is a statement queued after the batch's rows, which Postgres
// runs in the same pipeline: the rows before it must not stay.
func TestInserterAcksOnlyAfterCommit(t *testing.T) {
	t.Parallel()
	for _, writer := range writers {
		t.Run(writer, func(t *testing.T) {
			t.Parallel()
			var calls atomic.Int32
			b := setup(t, writer, func(insert amqpbridge.InsertBatchFunc) amqpbridge.InsertBatchFunc {
				return func(ctx context.Context, tx pgx.Tx, batch []*amqpbridge.Delivery) error {
					if err := insert(ctx, tx, batch); err != nil {
						return err
					}
					if calls.Add(1) == 1 {
						return errors.New("the database hiccups after the insert")
					}
					return nil
				}
			}, func(insert amqpbridge.InsertStatementsFunc) amqpbridge.InsertStatementsFunc {
				return func(ctx context.Context, s *amqpbridge.Statements, batch []*amqpbridge.Delivery) error {
					if err := insert(ctx, s, batch); err != nil {
						return err
					}
					if calls.Add(1) == 1 {
						s.Queue(`SELECT 1 / (SELECT count(*) FROM pg_class WHERE false)`) // division by zero, at execution
					}
					return nil
				}
			})
			testAcksOnlyAfterCommit(t, b, &calls)
		})
	}
}

func testAcksOnlyAfterCommit(t *testing.T, b *testBundle, calls *atomic.Int32) {
	for i := range 5 {
		b.publish(t, amqp.Publishing{MessageId: fmt.Sprintf("m-%d", i), Body: []byte{byte(i)}})
	}
	pgtest.WaitFor(t, 20*time.Second, "every message handled", func() (bool, error) {
		return len(b.handled()) == 5, nil
	})
	amqptest.Eventually(t, 10*time.Second, "everything acked", func() bool {
		return amqptest.Depth(t, b.ch, b.in.Topology().Main) == 0 && b.in.Stats().HandedOff == 5
	})
	require.Equal(t, uint64(1), b.in.Stats().FlushFailures)
	require.GreaterOrEqual(t, calls.Load(), int32(2), "the failed batch was written again")
	ids := map[string]int{}
	for _, m := range b.handled() {
		ids[m.ID]++
	}
	require.Equal(t, map[string]int{"m-0": 1, "m-1": 1, "m-2": 1, "m-3": 1, "m-4": 1}, ids, "the rolled-back batch left nothing to run")
}

// TestStatementsWake: with Statements, the bridge's round trip ends with
// the wake of River's producers of the inbox's queue, a notification on
// River's insert channel sent after the commit.
func TestStatementsWake(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ib, err := inbox.New(inbox.Config{Name: "woken", Queue: "woken_q", HandleFunc: func(context.Context, *inbox.Message) error { return nil }})
	require.NoError(t, err)
	listener, err := db.Pool.Acquire(ctx)
	require.NoError(t, err)
	defer listener.Release()
	_, err = listener.Exec(ctx, "LISTEN "+pgx.Identifier{db.Schema + ".river_insert"}.Sanitize())
	require.NoError(t, err)

	ch := amqptest.Channel(t, amqptest.Conn(t))
	in, err := amqpbridge.NewInbound(amqpbridge.Config{URL: amqptest.URL(), ConnectionName: amqptest.UniqueName("amqpinbox"), Logger: pgtest.Logger(t)},
		amqpbridge.InboundConfig{Queue: amqptest.UniqueName("woken"), DB: db.Pool, InsertStatements: amqpinbox.Statements(ib, db.Schema)})
	require.NoError(t, err)
	topo := in.Topology()
	t.Cleanup(func() {
		for _, n := range append([]string{topo.Main, topo.Failed}, topo.Retry[0].Queue) {
			_, _ = ch.QueueDelete(n, false, false, false)
		}
	})
	require.NoError(t, in.Start(ctx))
	defer func() { _ = in.Stop(context.Background()) }()
	require.NoError(t, ch.PublishWithContext(ctx, "", topo.Main, false, false, amqp.Publishing{MessageId: "m-1", Body: []byte("x")}))

	n, err := listener.Conn().WaitForNotification(ctx)
	require.NoError(t, err)
	require.JSONEq(t, `{"queue": "woken_q"}`, n.Payload)
	var rows int
	require.NoError(t, db.Pool.QueryRow(ctx, db.Q(`SELECT count(*) FROM /*schema*/tributary_inbox_batch WHERE inbox = 'woken'`)).Scan(&rows))
	require.Equal(t, 1, rows, "the wake follows the commit: the batch is there")
}
