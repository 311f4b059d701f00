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

	"github.com/tributary-run/tributary/amqpbridge/internal/amqptest"
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
	)
	c := startConsumer(t, cfg, ConsumerConfig{Queue: b.queue, Prefetch: 100, Concurrency: 4, Handler: func(ctx context.Context, d *Delivery) error {
		id, err := strconv.Atoi(string(d.Body))
		if err != nil {
			return Permanent(err)
		}
		if d.MessageID != "m-"+string(d.Body) {
			return Permanent(fmt.Errorf("body %s does not match message id %s", d.Body, d.MessageID))
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

	// Publish at a steady pace (the whole run takes a few seconds) so that
	// every fault hits while messages are being published and consumed.
	var published atomic.Int64 // confirmed
	pubErrs := make(chan error, 1)
	go func() {
		const tick = 20 * time.Millisecond
		perTick := max(1, total/(int(pace/tick)))
		ticker := time.NewTicker(tick)
		defer ticker.Stop()
		for start := 0; start < total; start += perTick {
			select {
			case <-ticker.C:
			case <-ctx.Done():
				pubErrs <- ctx.Err()
				return
			}
			msgs := make([]Message, 0, perTick)
			for id := start; id < min(start+perTick, total); id++ {
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
		}
		pubErrs <- nil
	}()

	closedConns := 0
	for round := range closes {
		// Faults follow each other as fast as rabbitmqctl allows, once the
		// previous one was recovered from, while the publisher keeps its pace.
		amqptest.Eventually(t, time.Minute, "consumer and publisher reconnected", func() bool {
			return c.Stats().Reconnects >= uint64(round) && pub.Stats().Published > 0
		})
		n := amqptest.CloseConnections(t, cfg.ConnectionName)
		t.Logf("fault %d: closed %d connections at %d consumed, %d confirmed", round+1, n, consumed.Load(), published.Load())
		require.GreaterOrEqual(t, n, 1)
		require.Less(t, published.Load(), int64(total), "fault %d came after publishing ended; the pace is too fast for rabbitmqctl here", round+1)
		closedConns += n
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
