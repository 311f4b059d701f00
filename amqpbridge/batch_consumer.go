package amqpbridge

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/tributary-run/tributary/queue"
)

// HandOffFunc takes a batch durably (stages it in Postgres, writes it to a
// sink, inserts jobs). It returns nil only when the batch is safe: the bridge
// then acks every message of the batch at once. On error the whole batch is
// nacked and redelivered after a backoff. A hand-off may settle single
// deliveries itself with Delivery.Nack (a poison message to .failed); the
// rest of the batch is still acked together.
type HandOffFunc func(ctx context.Context, batch []*Delivery) error

// BatchConsumerConfig configures a BatchConsumer.
type BatchConsumerConfig struct {
	// Queue is the logical queue name. Required.
	Queue string
	// HandOff receives each batch. Required.
	HandOff HandOffFunc
	// MaxEvents flushes a batch at this many messages; it is also the
	// prefetch, so the broker never delivers more than one batch ahead of an
	// ack. Defaults to Config.BatchMaxEvents.
	MaxEvents int
	// Prefetch overrides the prefetch. Defaults to MaxEvents, the batch-ACK
	// rule: the broker never delivers more than one batch ahead of an ack. A
	// larger value lets the next batch arrive while one is being handed off
	// (the inbound bridge uses twice its batch size).
	Prefetch int
	// MaxBytes flushes a batch at this many body bytes. Defaults to
	// Config.BatchMaxBytes.
	MaxBytes int
	// MaxAge flushes a batch whose oldest message waited this long, checked
	// every TimerInterval. Default to Config.BatchMaxAge and
	// Config.BatchTimerInterval.
	MaxAge        time.Duration
	TimerInterval time.Duration
	// FlushWhenIdle flushes as soon as no further delivery is waiting,
	// instead of waiting for a threshold. The inbound bridge uses it: low
	// latency at low rates, full batches under load. While every hand-off
	// slot is busy, an idle pause does not end the batch: it keeps taking
	// deliveries until a slot frees or it is full.
	FlushWhenIdle bool
	// IdleWait is the pause that counts as idle for FlushWhenIdle. Defaults
	// to 2ms.
	IdleWait time.Duration
	// HandOffConcurrency is how many hand-offs may run at once (the next
	// batch is handed off while the previous one is still being written).
	// Batches are still acked in order. Defaults to 1.
	HandOffConcurrency int
	// Name overrides the service name in logs. Defaults to "amqp batch
	// consumer {queue}".
	Name string
}

// BatchConsumer is the batch-ACK consumer: manual acks with prefetch equal to
// the batch size, a buffer flushed on count, bytes or age, one multiple-ack
// after a successful hand-off, and a nack of the whole batch on failure. Its
// channel carries nothing else, so a multiple-ack covers exactly the buffered
// messages. On Stop the buffer is handed off and acked before the channel
// and connection close.
type BatchConsumer struct {
	consumerBase
	bc BatchConsumerConfig

	flushes, flushFailures, handedOff uint64
	handOffTime, slotWait             time.Duration
	statsMu                           sync.Mutex
}

// NewBatchConsumer validates the configuration and returns a consumer.
func NewBatchConsumer(cfg Config, bc BatchConsumerConfig) (*BatchConsumer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if bc.Queue == "" {
		return nil, errors.New("batch consumer needs a queue name")
	}
	if bc.HandOff == nil {
		return nil, fmt.Errorf("batch consumer for queue %q needs a hand-off function", bc.Queue)
	}
	bc.MaxEvents = cmp.Or(bc.MaxEvents, cfg.BatchMaxEvents)
	bc.MaxBytes = cmp.Or(bc.MaxBytes, cfg.BatchMaxBytes)
	bc.MaxAge = cmp.Or(bc.MaxAge, cfg.BatchMaxAge)
	bc.TimerInterval = cmp.Or(bc.TimerInterval, cfg.BatchTimerInterval)
	bc.IdleWait = cmp.Or(bc.IdleWait, 2*time.Millisecond)
	bc.HandOffConcurrency = cmp.Or(bc.HandOffConcurrency, 1)
	if bc.HandOffConcurrency < 1 {
		return nil, fmt.Errorf("invalid hand-off concurrency %d for queue %q: want > 0", bc.HandOffConcurrency, bc.Queue)
	}
	bc.Prefetch = cmp.Or(bc.Prefetch, bc.MaxEvents)
	if bc.MaxEvents < 1 || bc.MaxEvents > 65535 {
		return nil, fmt.Errorf("invalid batch max events %d for queue %q: want 1..65535 (it is the prefetch)", bc.MaxEvents, bc.Queue)
	}
	if bc.Prefetch < bc.MaxEvents || bc.Prefetch > 65535 {
		return nil, fmt.Errorf("invalid prefetch %d for queue %q: want %d..65535 (at least a batch)", bc.Prefetch, bc.Queue, bc.MaxEvents)
	}
	topo := cfg.Topology(bc.Queue)
	bc.Name = cmp.Or(bc.Name, "amqp batch consumer "+topo.Main)
	bc.HandOff = tracedHandOff(topo.Main, bc.HandOff)
	return &BatchConsumer{
		consumerBase: newConsumerBase(cfg, topo, cfg.ConnectionName+".batch."+topo.Main, "batch consumer", bc.Prefetch),
		bc:           bc,
	}, nil
}

// Name implements queue.Service.
func (c *BatchConsumer) Name() string { return c.bc.Name }

// Topology returns the consumer's queue names.
func (c *BatchConsumer) Topology() Topology { return c.topo }

// BatchStats are cumulative counters of a batch consumer.
type BatchStats struct {
	ConsumerStats
	Flushes       uint64 // successful hand-offs
	FlushFailures uint64 // failed hand-offs (batch nacked)
	HandedOff     uint64 // messages acked after a hand-off
	// HandOffTime is the time hand-offs took, summed over the batches (with
	// HandOffConcurrency above 1 they overlap). SlotWait is the time the
	// consumer held a full batch because every hand-off slot was busy: the
	// hand-off, not the broker, was the slower side then.
	HandOffTime time.Duration
	SlotWait    time.Duration
}

// Stats returns the consumer's counters.
func (c *BatchConsumer) Stats() BatchStats {
	c.statsMu.Lock()
	defer c.statsMu.Unlock()
	return BatchStats{
		ConsumerStats: c.consumerStats(),
		Flushes:       c.flushes, FlushFailures: c.flushFailures, HandedOff: c.handedOff,
		HandOffTime: c.handOffTime, SlotWait: c.slotWait,
	}
}

// Start declares the topology, subscribes and returns.
func (c *BatchConsumer) Start(ctx context.Context) error {
	if err := c.start(ctx, c.Name(), func(*queue.Run) {}, c.consume, func() {}); err != nil {
		return err
	}
	c.logger.InfoContext(ctx, "amqp batch consumer started", "max_events", c.bc.MaxEvents, "max_bytes", c.bc.MaxBytes, "max_age", c.bc.MaxAge)
	return nil
}

// Stop stops consuming, hands off and acks what is buffered (and what the
// broker had already delivered), then closes the channel and connections.
// When ctx ends first, the hand-off is cancelled and the connection closed:
// the unacked messages are redelivered later. A hand-off that does not
// return within abandonGrace of that is left behind.
func (c *BatchConsumer) Stop(ctx context.Context) error { return c.stop(ctx) }

// batch is the buffer of one session.
type batch struct {
	items  []*Delivery
	bytes  int
	oldest time.Time
}

// pendingBatch is a batch whose hand-off was started.
type pendingBatch struct {
	items []*Delivery
	start time.Time
	done  chan struct{}
	err   error
	took  time.Duration // set before done closes
}

// consume runs one session until it is lost (false) or Stop was called
// (true). Buffering and every ack and nack happen on this goroutine; up to
// HandOffConcurrency hand-offs run at once, settled strictly in order, so a
// multiple-ack never covers a batch that is still being handed off.
func (c *BatchConsumer) consume(run *queue.Run, sess *consumerSession) bool {
	var (
		buf      batch
		inflight []*pendingBatch
	)
	ticker := time.NewTicker(c.bc.TimerInterval)
	defer ticker.Stop()
	idle := time.NewTimer(time.Hour)
	idle.Stop()

	add := func(raw amqp.Delivery) {
		c.stats.delivered.Add(1)
		d := newDelivery(c.topo.Main, sess.gen, raw, c)
		if len(d.Body) > c.cfg.MaxMessageBytes {
			_ = d.Nack(Permanent(fmt.Errorf("%w: %d bytes > limit %d", ErrMessageTooLarge, len(d.Body), c.cfg.MaxMessageBytes)))
			return
		}
		if len(buf.items) == 0 {
			buf.oldest = time.Now()
		}
		buf.items = append(buf.items, d)
		buf.bytes += len(d.Body)
	}
	full := func() bool { return len(buf.items) >= c.bc.MaxEvents || buf.bytes >= c.bc.MaxBytes }
	stop := run.Stopping().Done() // nil once Stop was seen
	settleOldest := func() {
		pb := inflight[0]
		<-pb.done
		inflight[0] = nil
		inflight = inflight[1:]
		c.settleBatch(run, sess, pb, stop == nil)
	}
	flush := func() {
		if len(buf.items) == 0 {
			return
		}
		if len(inflight) >= c.bc.HandOffConcurrency {
			// Every slot is busy: wait for the oldest (deliveries wait in
			// the broker's window meanwhile).
			waited := time.Now()
			for len(inflight) >= c.bc.HandOffConcurrency {
				settleOldest()
			}
			c.statsMu.Lock()
			c.slotWait += time.Since(waited)
			c.statsMu.Unlock()
		}
		pb := &pendingBatch{items: buf.items, start: time.Now(), done: make(chan struct{})}
		buf = batch{}
		if c.bc.HandOffConcurrency == 1 {
			pb.err = c.bc.HandOff(c.ctx, pb.items)
			pb.took = time.Since(pb.start)
			close(pb.done)
			c.settleBatch(run, sess, pb, stop == nil)
			return
		}
		go func() {
			defer close(pb.done)
			pb.err = c.bc.HandOff(c.ctx, pb.items)
			pb.took = time.Since(pb.start)
		}()
		inflight = append(inflight, pb)
	}
	oldestDone := func() <-chan struct{} {
		if len(inflight) == 0 {
			return nil
		}
		return inflight[0].done
	}
	drain := func() {
		for len(inflight) > 0 {
			settleOldest()
		}
	}

	// gather (FlushWhenIdle) takes what keeps arriving, up to a full batch,
	// until a pause of IdleWait, and flushes it. (A non-blocking receive is
	// not enough: amqp091-go hands deliveries over one at a time from its
	// own goroutine, so it would often see none.) While every hand-off slot
	// is busy, a batch flushed at a pause would only wait for one: it stays
	// open and keeps growing (up to full) until a slot frees, so the
	// batches are fuller exactly when the hand-offs are the slower side.
	//
	// The pause is measured from the last arrival, noted per delivery
	// (time.Now is cheap); the timer is re-armed only when it fires early.
	// Resetting it on every delivery would take the runtime's timer lock
	// twice a message, on the consuming goroutine.
	gather := func() {
		last := time.Now()
		idle.Reset(c.bc.IdleWait)
	more:
		for !full() {
			select {
			case raw, ok := <-sess.deliveries:
				if !ok {
					break more
				}
				add(raw)
				last = time.Now()
			case <-idle.C:
				if rest := c.bc.IdleWait - time.Since(last); rest > 0 {
					idle.Reset(rest)
					continue
				}
				break more
			}
		}
		idle.Stop()
		if full() || len(inflight) < c.bc.HandOffConcurrency {
			flush()
		}
	}

	for {
		select {
		case <-stop:
			// Stop consuming; what the broker already sent still arrives and
			// is handed off below, before the channel closes.
			_ = sess.ch.Cancel(sess.tag, false)
			stop = nil
		case raw, ok := <-sess.deliveries:
			if !ok {
				if stop == nil { // cancelled by Stop: flush the rest, ack, done
					flush()
					drain()
					return true
				}
				if len(buf.items) > 0 {
					c.logger.Warn("channel lost with a buffered batch; the broker redelivers it", "messages", len(buf.items))
				}
				drain() // their settlements fail: the broker redelivers them
				return false
			}
			add(raw)
			if c.bc.FlushWhenIdle {
				gather()
			} else if full() {
				flush()
			}
		case <-oldestDone():
			settleOldest()
			if c.bc.FlushWhenIdle && len(buf.items) > 0 {
				gather() // a slot is free: what gathered meanwhile, and what follows it
			}
		case <-ticker.C:
			if len(buf.items) > 0 && time.Since(buf.oldest) >= c.bc.MaxAge {
				flush()
			}
		case <-c.ctx.Done():
			drain()
			return true
		}
	}
}

// settleBatch settles a finished hand-off: one multiple-ack on success, one
// multiple-nack with requeue (after a backoff) on failure.
func (c *BatchConsumer) settleBatch(run *queue.Run, sess *consumerSession, pb *pendingBatch, stopping bool) {
	// The last delivery nobody settled individually carries the
	// multiple-ack: a tag that was acked already would make the broker
	// close the channel.
	var last *Delivery
	n := 0
	for _, d := range pb.items {
		if d.settled.CompareAndSwap(false, true) {
			last = d
			n++
		}
	}
	if last == nil {
		return
	}
	if pb.err != nil {
		c.statsMu.Lock()
		c.flushFailures++
		c.statsMu.Unlock()
		c.logger.Error("batch hand-off failed; nacking the batch for redelivery", "messages", n, "error", pb.err)
		if !stopping {
			t := time.NewTimer(c.cfg.RetryDelay(0))
			select {
			case <-t.C:
			case <-run.Stopping().Done():
			case <-run.Context().Done():
			}
			t.Stop()
		}
		if nerr := sess.ch.Nack(last.Tag, true, true); nerr != nil {
			c.logger.Warn("error nacking batch", "error", nerr)
		}
		return
	}
	if last.Generation != c.gen.Load() {
		c.stats.stale.Add(1)
		return
	}
	if aerr := sess.ch.Ack(last.Tag, true); aerr != nil {
		c.logger.Warn("batch handed off but the ack failed; the broker redelivers it", "messages", n, "error", aerr)
		return
	}
	c.stats.acked.Add(uint64(n))
	c.statsMu.Lock()
	c.handOffTime += pb.took
	c.flushes++
	c.handedOff += uint64(n)
	c.statsMu.Unlock()
	c.logger.Debug("batch handed off and acked", "messages", n, "duration", time.Since(pb.start))
}
