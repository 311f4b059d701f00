package amqpbridge

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/amqptest"
)

// heldReturns is how many message ids the session holds broker returns
// for, read or unread.
func (s *pubSession) heldReturns() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.returns) + len(s.returned)
}

func startPublisher(t *testing.T) *Publisher {
	t.Helper()
	cfg, _ := testConfig(t, "")
	p, err := NewPublisher(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Stop(context.Background()) })
	require.NoError(t, p.Connect(context.Background()))
	return p
}

func TestPublisherReturns(t *testing.T) {
	t.Parallel()

	// A waiter that gives up (its context ended) never takes the return of
	// its message; the session must not keep it for as long as it lives.
	t.Run("AbandonedWaitsLeaveNoReturnsBehind", func(t *testing.T) {
		t.Parallel()
		p := startPublisher(t)
		ctx := context.Background()
		nowhere := amqptest.UniqueName("no-such-queue")
		cancelled, cancel := context.WithCancel(ctx)
		cancel()
		const n = 200
		pending := make([]*Pending, 0, n)
		gaveUp := 0
		for range n {
			pd, err := p.PublishDeferred(ctx, "", nowhere, amqpPublishing(`{}`))
			require.NoError(t, err)
			pending = append(pending, pd)
			// Given up at once, before the broker's round trip can answer:
			// waiting after all n were sent let a quiet broker confirm every
			// one first, and then no waiter gave up.
			if err := pd.Wait(cancelled); errors.Is(err, context.Canceled) {
				gaveUp++
			}
		}
		require.NotZero(t, gaveUp, "no waiter gave up; the test shows nothing")
		for _, pd := range pending {
			<-pd.dc.Done()
		}
		// A publish that is waited for drains whatever the broker returned.
		var unroutable *UnroutableError
		require.ErrorAs(t, p.Publish(ctx, "", nowhere, amqpPublishing(`{}`)), &unroutable)
		sess := pending[0].sess
		deadline := time.Now().Add(5 * time.Second)
		for sess.heldReturns() != 0 {
			if time.Now().After(deadline) {
				t.Fatalf("returns of %d of %d abandoned waits are still held", sess.heldReturns(), gaveUp)
			}
			time.Sleep(10 * time.Millisecond) // polling until a deadline
		}
	})

	// Message ids are the caller's when it sets them: two publishes with one
	// id that are both returned must both be reported unroutable.
	t.Run("SameMessageIDTwiceBothReturned", func(t *testing.T) {
		t.Parallel()
		p := startPublisher(t)
		ctx := context.Background()
		nowhere := amqptest.UniqueName("no-such-queue")
		msg := amqpPublishing(`{}`)
		msg.MessageId = "same-id"
		first, err := p.PublishDeferred(ctx, "", nowhere, msg)
		require.NoError(t, err)
		second, err := p.PublishDeferred(ctx, "", nowhere, msg)
		require.NoError(t, err)
		var unroutable *UnroutableError
		require.ErrorAs(t, first.Wait(ctx), &unroutable)
		require.ErrorAs(t, second.Wait(ctx), &unroutable)
	})
}

// TestPublisherFlowControl blocks publishers with a memory alarm on a
// private broker (the alarm blocks every publisher of a node, so the shared
// broker is left alone): a publish must end with a clear error instead of
// waiting for as long as the alarm lasts, and the publisher must work again
// once it clears.
func TestPublisherFlowControl(t *testing.T) {
	t.Parallel()
	broker := amqptest.StartBroker(t)
	ctx := context.Background()
	cfg, b := testConfig(t, "")
	cfg.URL = broker.URL()
	p, err := NewPublisher(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Stop(context.Background()) })

	conn, err := amqp.Dial(broker.URL())
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	require.NoError(t, err)
	q, err := ch.QueueDeclare("flow", true, false, false, false, nil)
	require.NoError(t, err)
	require.NoError(t, p.Publish(ctx, "", q.Name, amqpPublishing(`{"n":0}`)))

	before := strings.TrimSpace(broker.Ctl(t, "eval", "vm_memory_monitor:get_vm_memory_high_watermark()."))
	broker.Ctl(t, "set_vm_memory_high_watermark", "0")
	t.Cleanup(func() { broker.Ctl(t, "set_vm_memory_high_watermark", before) })

	// The first publish is written (the broker blocks a connection when it
	// publishes) and fails as soon as the block is announced.
	errc := make(chan error, 1)
	go func() { errc <- p.Publish(context.Background(), "", q.Name, amqpPublishing(`{"n":1}`)) }()
	select {
	case err := <-errc:
		require.ErrorIs(t, err, ErrBlocked)
		require.ErrorContains(t, err, "low on memory")
		require.ErrorContains(t, err, `routing key "flow"`)
	case <-time.After(10 * time.Second):
		t.Fatal("a publish did not return within 10s while the broker blocked publishers")
	}
	require.True(t, b.logs.containsEventually(t, "amqp broker blocked the publisher"))

	// The next ones fail without writing anything more to the connection.
	published := p.Stats().Published
	require.ErrorIs(t, p.Publish(ctx, "", q.Name, amqpPublishing(`{"n":2}`)), ErrBlocked)
	var many []Message
	for i := range 3 {
		many = append(many, Message{RoutingKey: q.Name, Publishing: amqpPublishing(fmt.Sprintf(`{"many":%d}`, i))})
	}
	require.ErrorIs(t, p.PublishMany(ctx, many), ErrBlocked)
	require.Equal(t, published, p.Stats().Published)

	// The consumers' republisher waits for the block to lift, but no longer
	// than its context or PublishTimeout.
	waitCfg := cfg.withDefaults()
	waitCfg.PublishTimeout = 300 * time.Millisecond
	waiter := newPublisher(waitCfg, cfg.ConnectionName+".waiter")
	waiter.waitWhileBlocked = true
	err = waiter.Publish(ctx, "", q.Name, amqpPublishing(`{"n":3}`))
	require.ErrorIs(t, err, ErrBlocked, "the default deadline ends the wait")
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	waiter.cfg.PublishTimeout = time.Hour
	require.ErrorIs(t, waiter.Publish(short, "", q.Name, amqpPublishing(`{"n":4}`)), context.DeadlineExceeded, "the caller's deadline ends the wait")

	// Stopping a blocked publisher does not wait for the broker.
	stopped := make(chan error, 1)
	go func() { stopped <- waiter.Stop(ctx) }()
	select {
	case err := <-stopped:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("stopping a blocked publisher did not return within 10s")
	}

	broker.Ctl(t, "set_vm_memory_high_watermark", before)
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := p.Publish(ctx, "", q.Name, amqpPublishing(`{"n":5}`))
		if err == nil {
			break
		}
		require.ErrorIs(t, err, ErrBlocked)
		require.True(t, time.Now().Before(deadline), "publishes still fail 10s after the alarm cleared: %v", err)
		time.Sleep(20 * time.Millisecond) // polling the publisher until a deadline
	}
}
