package amqpbridge

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/amqptest"
)

// TestFaultConnectionsForceClosed publishes and consumes while the bridge's
// connections (publisher, consumer, the consumer's retry publisher) are
// force-closed by rabbitmqctl. Every confirmed message must be consumed;
// duplicates are counted and reported. Since the consumer acks only after its
// handler ran, an ack landing on the wrong message after a reconnect would
// remove an unhandled message and show up as a loss.
//
// The default run uses 2,000 messages and 2 closes; AMQP_FAULT_LONG=1 runs
// 20,000 messages and 6 closes.
func TestFaultConnectionsForceClosed(t *testing.T) {
	t.Parallel()
	total, closes, pace := 2000, 2, 10*time.Second
	if v, _ := strconv.ParseBool(os.Getenv("AMQP_FAULT_LONG")); v {
		total, closes, pace = 20000, 6, 40*time.Second
	}
	cfg, b := testConfig(t, amqptest.UniqueName("fault"))

	var (
		mu       sync.Mutex
		seen     = make(map[int]int, total)
		consumed atomic.Int64 // distinct ids
		deliver  atomic.Int64 // all deliveries
		slow     atomic.Bool
	)
	c := startConsumer(t, cfg, ConsumerConfig{Queue: b.queue, Prefetch: 100, Concurrency: 4, Handler: func(ctx context.Context, d *Delivery) error {
		id, err := strconv.Atoi(string(d.Body))
		if err != nil {
			return Permanent(err)
		}
		if d.MessageID != "m-"+string(d.Body) {
			return Permanent(fmt.Errorf("body %s does not match message id %s", d.Body, d.MessageID))
		}
		// While a fault is being injected, handlers work slowly, so the
		// consumer holds a full prefetch of unacked deliveries and busy
		// handlers when its connection dies: their settlements must be
		// dropped, the messages redelivered.
		if slow.Load() {
			time.Sleep(50 * time.Millisecond)
		}
		deliver.Add(1)
		mu.Lock()
		seen[id]++
		if seen[id] == 1 {
			consumed.Add(1)
		}
		mu.Unlock()
		return nil
	}})
	main := c.Topology().Main

	pub, err := NewPublisher(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Stop(context.Background()) })

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// Publish at a steady pace. Once publishing reaches fault k's mark and
	// fault k has not happened yet (rabbitmqctl is slow on a loaded
	// machine), the publisher slows to a trickle of one message per tick, so
	// every fault hits while messages are being published and consumed.
	var published atomic.Int64 // confirmed
	mark := func(k int) int { return (k + 1) * total / (closes + 1) }
	faultDone := make(chan struct{}, closes)
	pubErrs := make(chan error, 1)
	go func() {
		faults := 0
		const tick = 20 * time.Millisecond
		ticker := time.NewTicker(tick)
		defer ticker.Stop()
		for start := 0; start < total; {
			select {
			case <-ticker.C:
			case <-ctx.Done():
				pubErrs <- ctx.Err()
				return
			}
			n := max(1, total/(int(pace/tick)))
			for faults < closes && start >= mark(faults) {
				select {
				case <-faultDone:
					faults++
					continue
				default:
				}
				n = 1
				if start < total-1 {
					break
				}
				select { // keep the last message until every fault happened
				case <-faultDone:
					faults++
				case <-ctx.Done():
					pubErrs <- ctx.Err()
					return
				}
			}
			n = min(n, total-start)
			msgs := make([]Message, 0, n)
			for id := start; id < start+n; id++ {
				msgs = append(msgs, Message{RoutingKey: main, Publishing: amqp.Publishing{
					MessageId: fmt.Sprintf("m-%d", id), Body: []byte(strconv.Itoa(id)),
				}})
			}
			// A batch that was not wholly confirmed is published again: some
			// of it may then arrive twice, which the consumer counts.
			for {
				err := pub.PublishMany(ctx, msgs)
				if err == nil {
					break
				}
				if ctx.Err() != nil {
					pubErrs <- err
					return
				}
			}
			published.Add(int64(len(msgs)))
			start += n
		}
		pubErrs <- nil
	}()

	closedConns := 0
	for round := range closes {
		amqptest.Eventually(t, time.Minute, "consumer reconnected, publishing near the mark", func() bool {
			return c.Stats().Reconnects >= uint64(round) && published.Load() >= int64(mark(round)-total/(closes+1)/2)
		})
		slow.Store(true)
		n := amqptest.CloseConnections(t, cfg.ConnectionName)
		slow.Store(false)
		t.Logf("fault %d: closed %d connections at %d consumed, %d confirmed", round+1, n, consumed.Load(), published.Load())
		require.GreaterOrEqual(t, n, 1)
		require.Less(t, published.Load(), int64(total))
		closedConns += n
		faultDone <- struct{}{}
	}
	require.NoError(t, <-pubErrs)

	amqptest.Eventually(t, 2*time.Minute, "every confirmed message consumed", func() bool {
		return consumed.Load() == int64(total)
	})
	amqptest.Eventually(t, 30*time.Second, "queue drained", func() bool {
		return amqptest.Depth(t, b.ch, main) == 0
	})
	mu.Lock()
	dups := 0
	for id := range total {
		require.GreaterOrEqual(t, seen[id], 1, "message %d lost", id)
		dups += seen[id] - 1
	}
	mu.Unlock()
	st := c.Stats()
	ps := pub.Stats()
	t.Logf("fault run: %d messages, %d fault rounds closing %d connections; %d deliveries, %d duplicates; consumer reconnects %d, stale settlements dropped %d; publisher reconnects %d, published %d, confirmed %d",
		total, closes, closedConns, deliver.Load(), dups, st.Reconnects, st.Stale, ps.Reconnects, ps.Published, ps.Confirmed)
	amqptest.Eventually(t, 30*time.Second, "consumer reconnected after every fault", func() bool {
		return c.Stats().Reconnects >= uint64(closes)
	})
	require.Equal(t, 0, amqptest.Depth(t, b.ch, c.Topology().Failed), "nothing dead-lettered (a mismatched body/id would be)")
}
