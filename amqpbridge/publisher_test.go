package amqpbridge

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/amqpbridge/internal/amqptest"
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
		for range n {
			pd, err := p.PublishDeferred(ctx, "", nowhere, amqpPublishing(`{}`))
			require.NoError(t, err)
			pending = append(pending, pd)
		}
		gaveUp := 0
		for _, pd := range pending {
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
