package amqpbridge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/amqptest"
	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/internal/servicetest"
	"github.com/tributary-run/tributary/outbox"
	"github.com/tributary-run/tributary/queue"
)

func TestInbound(t *testing.T) {
	t.Parallel()

	setup := func(t *testing.T, insert func(client *queue.Client) InsertBatchFunc) (*Inbound, *testBundle, *pgtest.DB) {
		t.Helper()
		cfg, b := testConfig(t, amqptest.UniqueName("inbound"))
		db := pgtest.New(t)
		in := startInbound(t, cfg, b, InboundConfig{Queue: b.queue, DB: db.Pool, Insert: insert(db.Client(t))})
		return in, b, db
	}
	countJobs := func(t *testing.T, db *pgtest.DB, kind string) int {
		var n int
		require.NoError(t, db.Pool.QueryRow(context.Background(), db.Q("SELECT count(*) FROM /*schema*/river_job WHERE kind = $1"), kind).Scan(&n))
		return n
	}

	t.Run("MessagesBecomeJobsAndBadOnesFail", func(t *testing.T) {
		t.Parallel()
		in, b, db := setup(t, func(client *queue.Client) InsertBatchFunc {
			return JobInserter(client, "amqp.order", nil)
		})
		for i := range 50 {
			publishRaw(t, b.ch, in.Topology().Main, []byte(fmt.Sprintf(`{"order_id":%d}`, i)), nil)
			if i == 25 {
				publishRaw(t, b.ch, in.Topology().Main, []byte("not json"), nil)
			}
		}
		failed := amqptest.Get(t, b.ch, in.Topology().Failed, 10*time.Second)
		require.Equal(t, "not json", string(failed.Body))
		require.Contains(t, headerString(failed.Headers, HeaderFailureReason), "not valid JSON")
		amqptest.Eventually(t, 10*time.Second, "50 jobs", func() bool { return countJobs(t, db, "amqp.order") == 50 })
		amqptest.Eventually(t, 5*time.Second, "all acked", func() bool { return in.Stats().HandedOff == 50 })
		require.Equal(t, 0, amqptest.Depth(t, b.ch, in.Topology().Main))

		// Batches are inserted two at a time, so ids need not follow the
		// publish order; every order is there exactly once.
		rows, err := db.Pool.Query(context.Background(), db.Q("SELECT args FROM /*schema*/river_job WHERE kind = 'amqp.order'"))
		require.NoError(t, err)
		seen := map[int]int{}
		for rows.Next() {
			var args struct {
				OrderID int `json:"order_id"`
			}
			var raw json.RawMessage
			require.NoError(t, rows.Scan(&raw))
			require.NoError(t, json.Unmarshal(raw, &args))
			seen[args.OrderID]++
		}
		require.NoError(t, rows.Err())
		require.Len(t, seen, 50)
		for id, n := range seen {
			require.Equal(t, 1, n, "order %d", id)
		}
	})

	// A body that is JSON but that River's jsonb column cannot hold fails
	// alone: its insert error would roll back its whole batch, which the
	// broker would redeliver, to fail again, for ever.
	t.Run("BodyPostgresCannotStoreFailsAlone", func(t *testing.T) {
		t.Parallel()
		in, b, db := setup(t, func(client *queue.Client) InsertBatchFunc {
			return JobInserter(client, "amqp.note", nil)
		})
		for i := range 10 {
			publishRaw(t, b.ch, in.Topology().Main, []byte(fmt.Sprintf(`{"n":%d}`, i)), nil)
			if i == 5 {
				publishRaw(t, b.ch, in.Topology().Main, []byte(`{"text":"\u0000"}`), nil)
			}
		}
		failed := amqptest.Get(t, b.ch, in.Topology().Failed, 10*time.Second)
		require.Equal(t, `{"text":"\u0000"}`, string(failed.Body))
		require.Contains(t, headerString(failed.Headers, HeaderFailureReason), `\u0000`)
		amqptest.Eventually(t, 10*time.Second, "10 jobs", func() bool { return countJobs(t, db, "amqp.note") == 10 })
		amqptest.Eventually(t, 5*time.Second, "all settled", func() bool { return amqptest.Depth(t, b.ch, in.Topology().Main) == 0 })
	})

	t.Run("AckOnlyAfterCommit", func(t *testing.T) {
		t.Parallel()
		var calls atomic.Int32
		in, b, db := setup(t, func(client *queue.Client) InsertBatchFunc {
			jobs := JobInserter(client, "amqp.flaky", nil)
			return func(ctx context.Context, tx pgx.Tx, batch []*Delivery) error {
				if err := jobs(ctx, tx, batch); err != nil {
					return err
				}
				if calls.Add(1) == 1 {
					// Inserted, then the transaction fails: rolled back, not acked.
					return errors.New("database hiccup")
				}
				return nil
			}
		})
		publishRaw(t, b.ch, in.Topology().Main, []byte(`{"n":1}`), nil)
		amqptest.Eventually(t, 10*time.Second, "inserted after the redelivery", func() bool { return in.Stats().HandedOff == 1 })
		require.Equal(t, 1, countJobs(t, db, "amqp.flaky"), "the rolled-back insert left nothing")
		require.Equal(t, uint64(1), in.Stats().FlushFailures)
		require.Equal(t, int32(2), calls.Load())
	})
}

func TestOutbound(t *testing.T) {
	t.Parallel()
	cfg, b := testConfig(t, amqptest.UniqueName("outbound"))
	exchange := amqptest.UniqueName("tributary-events")
	t.Cleanup(func() {
		ch, err := amqptest.Conn(t).Channel()
		if err == nil {
			_ = ch.ExchangeDelete(exchange, false, false)
		}
	})
	pub, err := NewPublisher(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Stop(context.Background()) })
	out, err := NewOutbound(pub, OutboundConfig{Exchange: exchange})
	require.NoError(t, err)

	ev := func(id, typ string) outbox.Event {
		return outbox.Event{ID: id, EventType: typ, EventVersion: 2, EventKind: "integration", AggregateID: "order-9",
			Payload: json.RawMessage(`{"total":42}`), Metadata: outbox.Metadata{CorrelationID: "corr-1", Actor: "alice"},
			SourceService: "shop", CreatedAt: time.Now()}
	}
	// No queue bound yet: the broker returns the event, so it is not sent.
	err = out.PublishOutbox(context.Background(), []outbox.Event{ev("e0", "order.created")})
	var unroutable *UnroutableError
	require.ErrorAs(t, err, &unroutable)
	require.Equal(t, "order.created", unroutable.RoutingKey)

	q, err := b.ch.QueueDeclare(b.queue, false, true, false, false, nil)
	require.NoError(t, err)
	amqptest.DeleteQueuesOnCleanup(t, b.conn, q.Name)
	require.NoError(t, b.ch.QueueBind(q.Name, "order.*", exchange, false, nil))

	require.NoError(t, out.PublishOutbox(context.Background(), []outbox.Event{ev("e1", "order.created"), ev("e2", "order.paid")}))
	got := []amqp.Delivery{amqptest.Get(t, b.ch, q.Name, 5*time.Second), amqptest.Get(t, b.ch, q.Name, 5*time.Second)}
	require.Equal(t, "e1", got[0].MessageId)
	require.Equal(t, "order.created", got[0].RoutingKey)
	require.Equal(t, "order.paid", got[1].RoutingKey)
	require.Equal(t, "corr-1", got[0].CorrelationId)
	require.Equal(t, "order-9", got[0].Headers[HeaderAggregateID])
	require.Equal(t, int32(2), got[0].Headers[HeaderEventVersion])
	require.JSONEq(t, `{"total":42}`, string(got[0].Body))
	require.Equal(t, uint8(amqp.Persistent), got[0].DeliveryMode)

	lenient, err := NewOutbound(pub, OutboundConfig{Exchange: exchange, AllowUnroutable: true})
	require.NoError(t, err)
	require.NoError(t, lenient.PublishOutbox(context.Background(), []outbox.Event{ev("e3", "invoice.sent")}))
}

func TestDLQ(t *testing.T) {
	t.Parallel()

	t.Run("ListAndReplayWithRetryCountReset", func(t *testing.T) {
		t.Parallel()
		cfg, b := testConfig(t, amqptest.UniqueName("dlq"))
		cfg.QueuePrefix = "svc"
		cfg.MaxMessageRetries = 1
		var fail atomic.Bool
		fail.Store(true)
		handled := make(chan *Delivery, 10)
		c := startConsumer(t, cfg, ConsumerConfig{Queue: b.queue, Handler: func(ctx context.Context, d *Delivery) error {
			if fail.Load() {
				return errors.New("downstream down")
			}
			handled <- d
			return nil
		}})
		for i := range 3 {
			publishRaw(t, b.ch, c.Topology().Main, []byte(fmt.Sprintf(`{"i":%d}`, i)), nil)
		}
		amqptest.Eventually(t, 10*time.Second, "3 in .failed", func() bool { return amqptest.Depth(t, b.ch, c.Topology().Failed) == 3 })

		dlq, err := NewDLQ(cfg)
		require.NoError(t, err)
		msgs, depth, err := dlq.List(context.Background(), b.queue, 0)
		require.NoError(t, err)
		require.Equal(t, 3, depth)
		require.Len(t, msgs, 3)
		require.Equal(t, 1, msgs[0].RetryCount)
		require.Contains(t, msgs[0].Reason, "downstream down")
		require.Equal(t, c.Topology().Main, msgs[0].OriginalQueue)
		amqptest.Eventually(t, 5*time.Second, "listing left them in place", func() bool { return amqptest.Depth(t, b.ch, c.Topology().Failed) == 3 })

		fail.Store(false)
		n, err := dlq.Replay(context.Background(), b.queue+".failed", 2)
		require.NoError(t, err)
		require.Equal(t, 2, n)
		for range 2 {
			d := <-handled
			require.Equal(t, 0, d.RetryCount)
			require.NotContains(t, d.Headers, HeaderFailureReason)
		}
		require.Equal(t, 1, amqptest.Depth(t, b.ch, c.Topology().Failed))
		n, err = dlq.Replay(context.Background(), b.queue, 0)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		<-handled
	})

	// A message's own x-original-queue header is input from whoever could
	// publish to the failed queue: it must not choose where a replay goes.
	t.Run("ReplayIgnoresOriginalQueueHeader", func(t *testing.T) {
		t.Parallel()
		cfg, b := testConfig(t, amqptest.UniqueName("dlq-redirect"))
		topo := cfg.Topology(b.queue)
		victim := amqptest.UniqueName("dlq-victim")
		amqptest.DeleteQueuesOnCleanup(t, b.conn, topo.Main, topo.Failed, victim)
		for _, q := range []string{topo.Main, topo.Failed, victim} {
			_, err := b.ch.QueueDeclare(q, true, false, false, false, nil)
			require.NoError(t, err)
		}
		publishRaw(t, b.ch, topo.Failed, []byte(`{"forged":true}`), amqp.Table{HeaderOriginalQueue: victim, HeaderRetryCount: int32(5)})
		amqptest.Eventually(t, 5*time.Second, "message in .failed", func() bool { return amqptest.Depth(t, b.ch, topo.Failed) == 1 })

		dlq, err := NewDLQ(cfg)
		require.NoError(t, err)
		n, err := dlq.Replay(context.Background(), b.queue, 0)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		d := amqptest.Get(t, b.ch, topo.Main, 5*time.Second)
		require.JSONEq(t, `{"forged":true}`, string(d.Body))
		require.Zero(t, amqptest.Depth(t, b.ch, victim), "the replay followed the message's x-original-queue header")
	})

	t.Run("ReplayToExplicitTarget", func(t *testing.T) {
		t.Parallel()
		cfg, b := testConfig(t, amqptest.UniqueName("dlq-to"))
		cfg.QueuePrefix = "svc"
		topo := cfg.Topology(b.queue)
		other := amqptest.UniqueName("dlq-other")
		amqptest.DeleteQueuesOnCleanup(t, b.conn, topo.Main, topo.Failed, cfg.QueueName(other))
		for _, q := range []string{topo.Main, topo.Failed, cfg.QueueName(other)} {
			_, err := b.ch.QueueDeclare(q, true, false, false, false, nil)
			require.NoError(t, err)
		}
		publishRaw(t, b.ch, topo.Failed, []byte(`{"n":1}`), amqp.Table{HeaderOriginalQueue: topo.Main})
		amqptest.Eventually(t, 5*time.Second, "message in .failed", func() bool { return amqptest.Depth(t, b.ch, topo.Failed) == 1 })
		dlq, err := NewDLQ(cfg)
		require.NoError(t, err)

		for _, bad := range []struct{ target, mention string }{
			{b.queue + ".failed", "failed-message queue"},
			{" " + other, "space"},
			{strings.Repeat("q", 256), "over 255 bytes"},
		} {
			_, err := dlq.ReplayTo(context.Background(), b.queue, bad.target, 0)
			require.ErrorIs(t, err, ErrInvalidReplayTarget)
			require.ErrorContains(t, err, bad.mention)
			require.ErrorContains(t, err, fmt.Sprintf("%q", bad.target))
		}
		_, err = dlq.ReplayTo(context.Background(), b.queue, "no-such-"+other, 0)
		require.ErrorIs(t, err, ErrQueueNotFound)
		require.ErrorContains(t, err, `"svc/no-such-`+other+`"`)
		require.Equal(t, 1, amqptest.Depth(t, b.ch, topo.Failed), "a refused target replays nothing")

		n, err := dlq.ReplayTo(context.Background(), b.queue, other, 0)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		d := amqptest.Get(t, b.ch, cfg.QueueName(other), 5*time.Second)
		require.Equal(t, int32(0), d.Headers[HeaderRetryCount])
		require.NotContains(t, d.Headers, HeaderOriginalQueue)
		require.Zero(t, amqptest.Depth(t, b.ch, topo.Main))
	})

	t.Run("UnknownQueueIsAClearError", func(t *testing.T) {
		t.Parallel()
		cfg, _ := testConfig(t, "")
		dlq, err := NewDLQ(cfg)
		require.NoError(t, err)
		name := amqptest.UniqueName("no-such-queue")
		_, err = dlq.Replay(context.Background(), name, 5)
		require.ErrorIs(t, err, ErrQueueNotFound)
		require.Contains(t, err.Error(), fmt.Sprintf(`%q has no failed-message queue "%s.failed"`, name, name))
		_, _, err = dlq.List(context.Background(), name, 5)
		require.ErrorIs(t, err, ErrQueueNotFound)
	})
}

func TestServiceContract(t *testing.T) {
	t.Parallel()
	servicetest.Run(t, "amqpbridge.Publisher", func(t *testing.T) (queue.Service, error) {
		cfg, _ := testConfig(t, "")
		return NewPublisher(cfg)
	})
	servicetest.Run(t, "amqpbridge.Consumer", func(t *testing.T) (queue.Service, error) {
		cfg, b := testConfig(t, amqptest.UniqueName("contract"))
		cleanupTopology(t, b.conn, cfg.Topology(b.queue))
		return NewConsumer(cfg, ConsumerConfig{Queue: b.queue, Handler: func(context.Context, *Delivery) error { return nil }})
	})
	servicetest.Run(t, "amqpbridge.BatchConsumer", func(t *testing.T) (queue.Service, error) {
		cfg, b := testConfig(t, amqptest.UniqueName("contract-batch"))
		cleanupTopology(t, b.conn, cfg.Topology(b.queue))
		return NewBatchConsumer(cfg, BatchConsumerConfig{Queue: b.queue, HandOff: func(context.Context, []*Delivery) error { return nil }})
	})
	servicetest.Run(t, "amqpbridge.Inbound", func(t *testing.T) (queue.Service, error) {
		cfg, b := testConfig(t, amqptest.UniqueName("contract-inbound"))
		cleanupTopology(t, b.conn, cfg.Topology(b.queue))
		db := pgtest.New(t)
		return NewInbound(cfg, InboundConfig{Queue: b.queue, DB: db.Pool, Insert: func(context.Context, pgx.Tx, []*Delivery) error { return nil }})
	})
}
