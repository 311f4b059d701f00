package amqpbridge

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/tributary-run/tributary/queue"
)

// AckMode selects who settles deliveries.
type AckMode int

const (
	// AutoAck (the default) lets the bridge settle each delivery from the
	// handler's result. This is the Node service's "auto-ACK" mode, not
	// AMQP's no-ack: nothing is acked before the handler finished.
	AutoAck AckMode = iota
	// ManualAck hands settlement to the handler (Delivery.Ack/Nack).
	ManualAck
)

// Defaults for ConsumerConfig.
const (
	PrefetchDefault    = 10
	ConcurrencyDefault = 1
)

// ConsumerConfig configures one Consumer.
type ConsumerConfig struct {
	// Queue is the logical queue name; the broker name gets QueuePrefix.
	Queue string
	// Handler handles each delivery. Required.
	Handler HandlerFunc
	// Mode is AutoAck (default) or ManualAck.
	Mode AckMode
	// Prefetch is the channel's prefetch count. Defaults to 10.
	Prefetch int
	// Concurrency is how many handlers run at once. Defaults to 1.
	Concurrency int
}

// Consumer consumes one queue with retry tiers and a failed queue. It keeps
// its own connection (named "{ConnectionName}.consumer.{queue}") and
// reconnects with backoff when it is lost. Every channel gets a new
// generation number; a delivery can only be settled on the channel of its
// generation, so a late ack after a reconnect is dropped, never applied to
// another message.
type Consumer struct {
	consumerBase
	cc ConsumerConfig

	work    chan *Delivery
	workers sync.WaitGroup
}

type consumerCounters struct {
	delivered, acked, retried, failed, stale, reconnects atomic.Uint64
}

// ConsumerStats are cumulative counters of one consumer.
type ConsumerStats struct {
	Delivered  uint64 // deliveries handed to the handler
	Acked      uint64 // deliveries acked (handled, retried or dead-lettered)
	Retried    uint64 // republished to a retry tier
	Failed     uint64 // republished to .failed
	Stale      uint64 // settlements dropped because their channel was closed or replaced
	Reconnects uint64 // sessions opened after the first
	Generation uint64 // current channel generation
}

// NewConsumer validates the configuration and returns a consumer; Start
// declares the topology and subscribes.
func NewConsumer(cfg Config, cc ConsumerConfig) (*Consumer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cc.Queue == "" {
		return nil, errors.New("consumer needs a queue name")
	}
	if cc.Handler == nil {
		return nil, fmt.Errorf("consumer for queue %q needs a handler", cc.Queue)
	}
	cc.Prefetch = cmp.Or(cc.Prefetch, PrefetchDefault)
	cc.Concurrency = cmp.Or(cc.Concurrency, ConcurrencyDefault)
	if cc.Prefetch < 1 || cc.Prefetch > 65535 {
		return nil, fmt.Errorf("invalid prefetch %d for queue %q: want 1..65535", cc.Prefetch, cc.Queue)
	}
	if cc.Concurrency < 1 {
		return nil, fmt.Errorf("invalid concurrency %d for queue %q: want > 0", cc.Concurrency, cc.Queue)
	}
	cfg = cfg.withDefaults()
	topo := cfg.Topology(cc.Queue)
	return &Consumer{
		consumerBase: newConsumerBase(cfg, topo, cfg.ConnectionName+".consumer."+topo.Main, "consumer", cc.Prefetch),
		cc:           cc,
	}, nil
}

// Name implements queue.Service.
func (c *Consumer) Name() string { return "amqp consumer " + c.topo.Main }

// Topology returns the consumer's queue names.
func (c *Consumer) Topology() Topology { return c.topo }

// Stats returns the consumer's counters.
func (c *Consumer) Stats() ConsumerStats { return c.consumerStats() }

// Start declares the queues, subscribes and returns; consumption runs in the
// background. Start the consumer only after everything its handler needs.
func (c *Consumer) Start(ctx context.Context) error {
	err := c.start(ctx, c.Name(), func(run *queue.Run) {
		c.work = make(chan *Delivery)
		for range c.cc.Concurrency {
			c.workers.Add(1)
			run.Go(func() {
				defer c.workers.Done()
				c.worker(run.Context())
			})
		}
	}, c.pump, func() {
		// The handlers settle on the session's channel: they finish before
		// it closes.
		close(c.work)
		c.workers.Wait()
	})
	if err != nil {
		return err
	}
	c.logger.InfoContext(ctx, "amqp consumer started", "mode", c.cc.Mode, "prefetch", c.cc.Prefetch, "concurrency", c.cc.Concurrency)
	return nil
}

// Stop stops consuming, lets running and already-delivered messages finish,
// closes the channel and connections. When ctx ends first, handlers are
// cancelled and the connection closed: unacked messages are redelivered
// later. A handler that does not return within abandonGrace of that is
// left behind.
func (c *Consumer) Stop(ctx context.Context) error { return c.stop(ctx) }

// pump forwards deliveries of one session to the workers until the session
// ends (false) or Stop was called (true). On Stop it cancels the
// subscription and still hands over what the broker had already delivered.
func (c *Consumer) pump(run *queue.Run, sess *consumerSession) bool {
	stop := run.Stopping().Done()
	for {
		select {
		case <-stop:
			_ = sess.ch.Cancel(sess.tag, false)
			stop = nil
		case raw, ok := <-sess.deliveries:
			if !ok {
				return stop == nil
			}
			c.stats.delivered.Add(1)
			select {
			case c.work <- newDelivery(c.topo.Main, sess.gen, raw, c):
			case <-run.Context().Done():
				return true
			}
		}
	}
}

func (c *Consumer) worker(ctx context.Context) {
	for d := range c.work {
		c.process(ctx, d)
	}
}

func (c *Consumer) process(ctx context.Context, d *Delivery) {
	if len(d.Body) > c.cfg.MaxMessageBytes {
		c.settle(ctx, d, Permanent(fmt.Errorf("%w: %d bytes > limit %d", ErrMessageTooLarge, len(d.Body), c.cfg.MaxMessageBytes)))
		return
	}
	err := callHandler(ctx, c.cc.Handler, d)
	if c.cc.Mode == ManualAck {
		if err != nil && !d.Settled() {
			c.settle(ctx, d, Permanent(fmt.Errorf("handler returned an error without settling: %w", err)))
		}
		return
	}
	c.settle(ctx, d, err)
}

// settle settles d from a handler result unless it was settled already.
func (c *Consumer) settle(ctx context.Context, d *Delivery, result error) {
	if !d.settled.CompareAndSwap(false, true) {
		return
	}
	var err error
	if result == nil {
		err = c.ackDelivery(d)
	} else {
		err = c.nackDelivery(d, result)
	}
	if err != nil && !errors.Is(err, ErrStaleDelivery) {
		c.logger.WarnContext(ctx, "error settling delivery", "message_id", d.MessageID, "error", err)
	}
}
