package amqpbridge

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/amqptest"
)

func TestConsumerAutoAck(t *testing.T) {
	t.Parallel()

	t.Run("AlwaysFailingRetriesThenFailed", func(t *testing.T) {
		t.Parallel()
		cfg, b := testConfig(t, amqptest.UniqueName("retry"))
		var (
			mu     sync.Mutex
			times  []time.Time
			counts []int
		)
		c := startConsumer(t, cfg, ConsumerConfig{Queue: b.queue, Handler: func(ctx context.Context, d *Delivery) error {
			mu.Lock()
			times = append(times, time.Now())
			counts = append(counts, d.RetryCount)
			mu.Unlock()
			return errors.New("boom")
		}})
		publishRaw(t, b.ch, c.Topology().Main, []byte(`{"n":1}`), nil)

		failed := amqptest.Get(t, b.ch, c.Topology().Failed, 15*time.Second)
		require.Contains(t, headerString(failed.Headers, HeaderFailureReason), "boom")
		require.Contains(t, headerString(failed.Headers, HeaderFailureReason), "retries exhausted")
		require.Equal(t, MaxMessageRetriesDefault, RetryCount(failed.Headers))
		require.JSONEq(t, `{"n":1}`, string(failed.Body))

		mu.Lock()
		defer mu.Unlock()
		require.Len(t, times, MaxMessageRetriesDefault+1, "deliveries")
		require.Equal(t, []int{0, 1, 2, 3, 4, 5}, counts)
		for n := 0; n < MaxMessageRetriesDefault; n++ {
			want := cfg.RetryDelay(n) // 50, 100, 200, 400, 400 ms
			got := times[n+1].Sub(times[n])
			t.Logf("retry %d: want %s, got %s", n, want, got)
			require.GreaterOrEqual(t, got, want-5*time.Millisecond, "retry %d came too early", n)
			require.LessOrEqual(t, got, want+400*time.Millisecond, "retry %d came too late", n)
		}
		amqptest.Eventually(t, 5*time.Second, "failed counted", func() bool { return c.Stats().Failed == 1 })
		require.Equal(t, uint64(MaxMessageRetriesDefault), c.Stats().Retried)
	})

	t.Run("ShortDelayNotHeldBehindLongDelay", func(t *testing.T) {
		t.Parallel()
		cfg, b := testConfig(t, amqptest.UniqueName("tiers"))
		cfg.MaxMessageRetries = 6
		cfg.RetryMax = 1600 * time.Millisecond
		type seen struct{ first, second time.Time }
		var (
			mu    sync.Mutex
			order []string
			at    = map[string]*seen{}
		)
		c := startConsumer(t, cfg, ConsumerConfig{Queue: b.queue, Handler: func(ctx context.Context, d *Delivery) error {
			mu.Lock()
			defer mu.Unlock()
			s := at[d.MessageID]
			if s == nil {
				at[d.MessageID] = &seen{first: time.Now()}
				return errors.New("fail once")
			}
			s.second = time.Now()
			order = append(order, d.MessageID)
			return nil
		}})
		// "long" starts at retry 5: its retry waits 1600 ms. "short" waits 50 ms.
		pub := func(id string, retry int32) {
			require.NoError(t, b.ch.PublishWithContext(context.Background(), "", c.Topology().Main, false, false, amqp.Publishing{
				MessageId: id, Body: []byte(`{}`), Headers: amqp.Table{HeaderRetryCount: retry},
			}))
		}
		pub("long", 5)
		amqptest.Eventually(t, 5*time.Second, "long failed once", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return at["long"] != nil
		})
		pub("short", 0)
		amqptest.Eventually(t, 10*time.Second, "both redelivered", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(order) == 2
		})
		mu.Lock()
		defer mu.Unlock()
		require.Equal(t, []string{"short", "long"}, order)
		shortGap := at["short"].second.Sub(at["short"].first)
		longGap := at["long"].second.Sub(at["long"].first)
		t.Logf("short retry waited %s, long retry waited %s", shortGap, longGap)
		require.Less(t, shortGap, 800*time.Millisecond)
		require.GreaterOrEqual(t, longGap, 1600*time.Millisecond-5*time.Millisecond)
	})

	t.Run("PanicGoesToFailed", func(t *testing.T) {
		t.Parallel()
		cfg, b := testConfig(t, amqptest.UniqueName("panic"))
		var calls sync.WaitGroup
		calls.Add(2)
		c := startConsumer(t, cfg, ConsumerConfig{Queue: b.queue, Handler: func(ctx context.Context, d *Delivery) error {
			defer calls.Done()
			if string(d.Body) == "panic" {
				panic("handler exploded")
			}
			return nil
		}})
		publishRaw(t, b.ch, c.Topology().Main, []byte("panic"), nil)
		publishRaw(t, b.ch, c.Topology().Main, []byte("fine"), nil)
		failed := amqptest.Get(t, b.ch, c.Topology().Failed, 5*time.Second)
		require.Contains(t, headerString(failed.Headers, HeaderFailureReason), "handler exploded")
		calls.Wait()
		require.Equal(t, uint64(0), c.Stats().Retried)
	})
}

func TestConsumerBadInput(t *testing.T) {
	t.Parallel()

	t.Run("NonJSONBodyFailsWithoutRetry", func(t *testing.T) {
		t.Parallel()
		cfg, b := testConfig(t, amqptest.UniqueName("badjson"))
		type order struct {
			ID int `json:"id"`
		}
		var called int
		var mu sync.Mutex
		c := startConsumer(t, cfg, ConsumerConfig{Queue: b.queue, Handler: JSONHandler(func(ctx context.Context, o order, d *Delivery) error {
			mu.Lock()
			called++
			mu.Unlock()
			return nil
		})})
		publishRaw(t, b.ch, c.Topology().Main, []byte("this is not json"), nil)
		failed := amqptest.Get(t, b.ch, c.Topology().Failed, 5*time.Second)
		require.Contains(t, headerString(failed.Headers, HeaderFailureReason), "invalid JSON body")
		require.Equal(t, 0, RetryCount(failed.Headers))
		require.Equal(t, uint64(0), c.Stats().Retried)
		mu.Lock()
		require.Equal(t, 0, called)
		mu.Unlock()
	})

	// The same rule as event payloads: a body with a repeated key or a key
	// that matches a field only when case is ignored reads differently in
	// other decoders, so it fails at once. Unknown keys stay allowed: other
	// producers (the Node service) may add fields.
	t.Run("AmbiguousJSONBodyFailsWithoutRetry", func(t *testing.T) {
		t.Parallel()
		cfg, b := testConfig(t, amqptest.UniqueName("ambiguous"))
		type order struct {
			ID int `json:"id"`
		}
		handled := make(chan int, 10)
		c := startConsumer(t, cfg, ConsumerConfig{Queue: b.queue, Handler: JSONHandler(func(ctx context.Context, o order, d *Delivery) error {
			handled <- o.ID
			return nil
		})})
		publishRaw(t, b.ch, c.Topology().Main, []byte(`{"id":1,"id":2}`), nil)
		publishRaw(t, b.ch, c.Topology().Main, []byte(`{"ID":3}`), nil)
		publishRaw(t, b.ch, c.Topology().Main, []byte(`{"id":4,"added_later":true}`), nil)
		require.Equal(t, 4, <-handled)
		reasons := []string{
			headerString(amqptest.Get(t, b.ch, c.Topology().Failed, 5*time.Second).Headers, HeaderFailureReason),
			headerString(amqptest.Get(t, b.ch, c.Topology().Failed, 5*time.Second).Headers, HeaderFailureReason),
		}
		require.Contains(t, reasons[0], `duplicate key "id"`)
		require.Contains(t, reasons[1], `key "ID" matches field "id" only when case is ignored`)
		require.Equal(t, uint64(0), c.Stats().Retried)
		require.Empty(t, handled)
	})

	t.Run("OversizeMessageRejected", func(t *testing.T) {
		t.Parallel()
		cfg, b := testConfig(t, amqptest.UniqueName("oversize"))
		cfg.MaxMessageBytes = 1024
		c := startConsumer(t, cfg, ConsumerConfig{Queue: b.queue, Handler: func(ctx context.Context, d *Delivery) error {
			return errors.New("handler must not see an over-size message")
		}})
		big := make([]byte, 4096)
		publishRaw(t, b.ch, c.Topology().Main, big, nil)
		failed := amqptest.Get(t, b.ch, c.Topology().Failed, 5*time.Second)
		require.Contains(t, headerString(failed.Headers, HeaderFailureReason), "message too large: 4096 bytes > limit 1024")
		require.Equal(t, uint64(0), c.Stats().Retried)

		// The bridge's own publisher refuses it up front.
		p, err := NewPublisher(cfg)
		require.NoError(t, err)
		t.Cleanup(func() { _ = p.Stop(context.Background()) })
		err = p.Publish(context.Background(), "", c.Topology().Main, amqp.Publishing{Body: big})
		require.ErrorIs(t, err, ErrMessageTooLarge)
		require.Contains(t, err.Error(), "4096 bytes > limit 1024")
	})
}

func TestConsumerManualAck(t *testing.T) {
	t.Parallel()

	t.Run("SecondSettleChangesNothing", func(t *testing.T) {
		t.Parallel()
		cfg, b := testConfig(t, amqptest.UniqueName("manual"))
		results := make(chan []error, 3)
		c := startConsumer(t, cfg, ConsumerConfig{Queue: b.queue, Mode: ManualAck, Handler: func(ctx context.Context, d *Delivery) error {
			switch string(d.Body) {
			case "ack-twice":
				results <- []error{d.Ack(), d.Ack(), d.Nack(errors.New("late nack"))}
			case "nack-then-ack":
				results <- []error{d.Nack(Permanent(errors.New("rejected by handler"))), d.Ack(), d.Nack(nil)}
			default:
				results <- []error{d.Ack()}
			}
			return nil
		}})
		main := c.Topology().Main
		publishRaw(t, b.ch, main, []byte("ack-twice"), nil)
		require.Equal(t, []error{nil, ErrAlreadySettled, ErrAlreadySettled}, <-results)
		publishRaw(t, b.ch, main, []byte("nack-then-ack"), nil)
		require.Equal(t, []error{nil, ErrAlreadySettled, ErrAlreadySettled}, <-results)
		// The channel is still the first one: a later message flows on it.
		publishRaw(t, b.ch, main, []byte("after"), nil)
		require.Equal(t, []error{nil}, <-results)

		failed := amqptest.Get(t, b.ch, c.Topology().Failed, 5*time.Second)
		require.Equal(t, "nack-then-ack", string(failed.Body))
		require.Contains(t, headerString(failed.Headers, HeaderFailureReason), "rejected by handler")
		amqptest.Eventually(t, 5*time.Second, "all acked", func() bool { return c.Stats().Acked == 3 })
		st := c.Stats()
		require.Equal(t, uint64(1), st.Generation, "channel was never reopened")
		require.Equal(t, uint64(0), st.Reconnects)
		require.Equal(t, uint64(3), st.Acked)
		require.Equal(t, 0, amqptest.Depth(t, b.ch, main))
		require.Equal(t, 0, amqptest.Depth(t, b.ch, c.Topology().Failed))
	})

	t.Run("ErrorWithoutSettlingGoesToFailed", func(t *testing.T) {
		t.Parallel()
		cfg, b := testConfig(t, amqptest.UniqueName("manualerr"))
		c := startConsumer(t, cfg, ConsumerConfig{Queue: b.queue, Mode: ManualAck, Handler: func(ctx context.Context, d *Delivery) error {
			return errors.New("could not process")
		}})
		publishRaw(t, b.ch, c.Topology().Main, []byte("x"), nil)
		failed := amqptest.Get(t, b.ch, c.Topology().Failed, 5*time.Second)
		require.Contains(t, headerString(failed.Headers, HeaderFailureReason), "without settling: could not process")
		require.Equal(t, uint64(0), c.Stats().Retried)
	})

	t.Run("StaleAckAfterReconnectIsDropped", func(t *testing.T) {
		t.Parallel()
		cfg, b := testConfig(t, amqptest.UniqueName("stale"))
		held := make(chan *Delivery, 10)
		c := startConsumer(t, cfg, ConsumerConfig{Queue: b.queue, Mode: ManualAck, Handler: func(ctx context.Context, d *Delivery) error {
			held <- d // settled later by the test
			return nil
		}})
		publishRaw(t, b.ch, c.Topology().Main, []byte("only"), nil)
		first := <-held
		require.Equal(t, uint64(1), first.Generation)

		// Kill the consumer's connection: the broker requeues the message and
		// the consumer reconnects on generation 2, where the redelivery has
		// the same delivery tag as the old one.
		require.GreaterOrEqual(t, amqptest.CloseConnections(t, cfg.ConnectionName+".consumer"), 1)
		second := <-held
		require.Equal(t, uint64(2), second.Generation)
		require.Equal(t, "only", string(second.Body))
		require.Equal(t, first.Tag, second.Tag, "same tag on the new channel: acking the old one blindly would settle this one")

		require.ErrorIs(t, first.Ack(), ErrStaleDelivery)
		require.Equal(t, uint64(1), c.Stats().Stale)

		// The redelivered message is still unacked: losing the channel once
		// more delivers it a third time.
		require.GreaterOrEqual(t, amqptest.CloseConnections(t, cfg.ConnectionName+".consumer"), 1)
		third := <-held
		require.Equal(t, uint64(3), third.Generation)
		require.ErrorIs(t, second.Ack(), ErrStaleDelivery)
		require.NoError(t, third.Ack())
		amqptest.Eventually(t, 5*time.Second, "queue drained", func() bool {
			return amqptest.Depth(t, b.ch, c.Topology().Main) == 0
		})
	})
}

func TestConsumerInterop(t *testing.T) {
	t.Parallel()

	t.Run("NodeStylePublisherWithPrefixAndRetryCount", func(t *testing.T) {
		t.Parallel()
		cfg, b := testConfig(t, amqptest.UniqueName("interop"))
		cfg.QueuePrefix = "mike"
		got := make(chan *Delivery, 10)
		c := startConsumer(t, cfg, ConsumerConfig{Queue: b.queue, Handler: func(ctx context.Context, d *Delivery) error {
			got <- d
			return errors.New("still failing")
		}})
		require.Equal(t, "mike/"+b.queue, c.Topology().Main)
		// amqplib encodes a JS number as a 64-bit integer or a double.
		publishRaw(t, b.ch, "mike/"+b.queue, []byte(`{"hello":"node"}`), amqp.Table{HeaderRetryCount: int64(3)})
		d := <-got
		require.Equal(t, 3, d.RetryCount)
		require.JSONEq(t, `{"hello":"node"}`, string(d.Body))
		require.Equal(t, 4, (<-got).RetryCount)
		require.Equal(t, 5, (<-got).RetryCount)
		failed := amqptest.Get(t, b.ch, c.Topology().Failed, 5*time.Second)
		require.Equal(t, 5, RetryCount(failed.Headers))
		amqptest.Eventually(t, 5*time.Second, "failed counted", func() bool { return c.Stats().Failed == 1 })
		require.Equal(t, uint64(2), c.Stats().Retried)

		require.Equal(t, 7, RetryCount(amqp.Table{HeaderRetryCount: float64(7)}))
		require.Equal(t, 2, RetryCount(amqp.Table{HeaderRetryCount: int16(2)}))
		require.Equal(t, 0, RetryCount(amqp.Table{}))
	})

	// A count below zero from another producer must not buy it about 2^31
	// retries: it counts as no retries yet, so the message gets the
	// configured number and then goes to .failed.
	t.Run("NegativeRetryCountCountsAsZero", func(t *testing.T) {
		t.Parallel()
		cfg, b := testConfig(t, amqptest.UniqueName("negative"))
		cfg.MaxMessageRetries = 2
		var (
			mu     sync.Mutex
			counts []int
		)
		c := startConsumer(t, cfg, ConsumerConfig{Queue: b.queue, Handler: func(ctx context.Context, d *Delivery) error {
			mu.Lock()
			defer mu.Unlock()
			counts = append(counts, d.RetryCount)
			return errors.New("still failing")
		}})
		publishRaw(t, b.ch, c.Topology().Main, []byte(`{"n":1}`), amqp.Table{HeaderRetryCount: int32(math.MinInt32)})
		failed := amqptest.Get(t, b.ch, c.Topology().Failed, 10*time.Second)
		require.Equal(t, 2, RetryCount(failed.Headers))
		mu.Lock()
		defer mu.Unlock()
		require.Equal(t, []int{0, 1, 2}, counts)
	})

	t.Run("RetryCountOfEveryHeaderType", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct {
			value any
			want  int
		}{
			{int16(2), 2},
			{int64(3), 3},
			{float64(7), 7},
			{"4", 4},
			{[]byte("5"), 5},
			{amqp.Decimal{Scale: 1, Value: 60}, 6},
			{nil, 0},
			// Below zero, not a number, or not a count at all: no retries yet.
			{int32(math.MinInt32), 0},
			{int64(math.MinInt64), 0},
			{int8(-1), 0},
			{float64(-0.5), 0},
			{math.Inf(-1), 0},
			{math.NaN(), 0},
			{"-3", 0},
			{"three", 0},
			{amqp.Decimal{Scale: 0, Value: -2}, 0},
			// Above what a 32-bit header holds: as many as it holds.
			{uint64(math.MaxUint64), math.MaxInt32},
			{int64(math.MaxInt64), math.MaxInt32},
			{math.Inf(1), math.MaxInt32},
			{float64(1e300), math.MaxInt32},
			{"99999999999999999999", math.MaxInt32},
		} {
			h := amqp.Table{}
			if tc.value != nil {
				h[HeaderRetryCount] = tc.value
			}
			require.Equal(t, tc.want, RetryCount(h), "%T %v", tc.value, tc.value)
		}
	})

	t.Run("ExistingQueueWithOtherArgumentsWarnsAndWorks", func(t *testing.T) {
		t.Parallel()
		cfg, b := testConfig(t, amqptest.UniqueName("existing"))
		topo := cfg.Topology(b.queue)
		cleanupTopology(t, b.conn, topo)
		// Declared by someone else, without our dead-letter arguments, and a
		// retry tier with another TTL.
		_, err := b.ch.QueueDeclare(topo.Main, true, false, false, false, amqp.Table{"x-max-length": int32(100000)})
		require.NoError(t, err)
		_, err = b.ch.QueueDeclare(topo.Retry[0].Queue, true, false, false, false, amqp.Table{
			"x-message-ttl": int32(999), "x-dead-letter-exchange": "", "x-dead-letter-routing-key": topo.Main,
		})
		require.NoError(t, err)

		got := make(chan string, 1)
		startConsumer(t, cfg, ConsumerConfig{Queue: b.queue, Handler: func(ctx context.Context, d *Delivery) error {
			got <- string(d.Body)
			return nil
		}})
		logs := b.logs.String()
		require.True(t, containsAll(logs, "queue exists with different arguments", "queue="+topo.Main, "argument=x-"), logs)
		require.True(t, containsAll(logs, "queue="+topo.Retry[0].Queue, "argument=x-message-ttl"), logs)
		publishRaw(t, b.ch, topo.Main, []byte("still consumed"), nil)
		require.Equal(t, "still consumed", <-got)
	})
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	require.NoError(t, Config{}.Validate())
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{URL: "http://x"}, `invalid URL "http://x"`},
		{Config{URL: "amqp://u:secret@h:5672/"}, ""},
		{Config{MaxMessageRetries: 101}, `MaxMessageRetries "101"`},
		{Config{RetryBase: time.Second, RetryMax: time.Millisecond}, `RetryMax "1ms"`},
		{Config{BatchMaxEvents: 70000}, `BatchMaxEvents "70000"`},
		{Config{PublishTimeout: -time.Second}, `PublishTimeout "-1s"`},
		{Config{QueuePrefix: "a b"}, `QueuePrefix "a b"`},
	} {
		err := tc.cfg.Validate()
		if tc.want == "" {
			require.NoError(t, err)
			continue
		}
		require.ErrorContains(t, err, tc.want)
	}
	require.NotContains(t, Config{URL: "ftp://u:secret@h/"}.Validate().Error(), "secret")

	cfg := Config{RetryBase: 4 * time.Second, RetryMax: 60 * time.Second}
	var got []time.Duration
	for n := range 6 {
		got = append(got, cfg.RetryDelay(n))
	}
	require.Equal(t, []time.Duration{4 * time.Second, 8 * time.Second, 16 * time.Second, 32 * time.Second, 60 * time.Second, 60 * time.Second}, got)
	topo := Config{QueuePrefix: "mike"}.Topology("orders")
	require.Equal(t, "mike/orders", topo.Main)
	require.Equal(t, "mike/orders.failed", topo.Failed)
	var tiers []string
	for _, r := range topo.Retry {
		tiers = append(tiers, r.Queue)
	}
	require.Equal(t, []string{"mike/orders.retry.4000", "mike/orders.retry.8000", "mike/orders.retry.16000", "mike/orders.retry.32000", "mike/orders.retry.60000"}, tiers)
	require.Equal(t, "orders", Config{}.QueueName("orders"))
	_ = fmt.Sprint()
}
