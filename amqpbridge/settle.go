package amqpbridge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// settlement is what consumers share to settle deliveries: the channel
// generation check, and routing of failures to a retry tier or .failed
// through a confirming publisher.
type settlement struct {
	cfg    Config
	topo   Topology
	pub    *Publisher
	logger *slog.Logger
	ctx    context.Context // lives until a forced stop
	gen    atomic.Uint64
	stats  consumerCounters
}

// newSettlement is the settlement of a consumer named name on topo. Its
// publisher dead-letters and retries: an over-size message must not be
// refused by the size limit that sent it to .failed.
func newSettlement(cfg Config, topo Topology, name string) settlement {
	pubCfg := cfg
	pubCfg.MaxMessageBytes = math.MaxInt
	pub := newPublisher(pubCfg, name+".publisher")
	// A republish that failed at once under flow control would requeue the
	// delivery and run its handler again and again while the alarm lasts;
	// waiting (up to PublishTimeout) paces it instead.
	pub.waitWhileBlocked = true
	return settlement{
		cfg:    cfg,
		topo:   topo,
		logger: cfg.Logger.With("queue", topo.Main),
		pub:    pub,
	}
}

// openSession dials, declares the topology once (*declared records it),
// sets the prefetch and starts consuming the main queue on a channel of a
// new generation. what names the consumer kind in errors.
func (c *settlement) openSession(ctx context.Context, name, what string, declared *bool, prefetch int) (*consumerSession, error) {
	conn, err := dial(c.cfg, name)
	if err != nil {
		return nil, err
	}
	if !*declared {
		if _, err := declareTopology(ctx, c.logger, conn.Channel, c.topo); err != nil {
			_ = conn.Close()
			return nil, err
		}
		*declared = true
	}
	ch, err := conn.Channel()
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("error opening %s channel: %w", what, err)
	}
	if err := ch.Qos(prefetch, 0, false); err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("error setting prefetch %d: %w", prefetch, err)
	}
	gen := c.gen.Add(1)
	tag := fmt.Sprintf("%s#%d", name, gen)
	deliveries, err := ch.Consume(c.topo.Main, tag, false, false, false, false, nil)
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("error subscribing to %q: %w", c.topo.Main, err)
	}
	return &consumerSession{conn: conn, ch: ch, gen: gen, tag: tag, deliveries: deliveries}, nil
}

func (c *settlement) ackDelivery(d *Delivery) error {
	if d.Generation != c.gen.Load() {
		c.stats.stale.Add(1)
		return ErrStaleDelivery
	}
	if err := d.ack.Ack(d.Tag, false); err != nil {
		if errors.Is(err, amqp.ErrClosed) {
			// The channel died before the reconnect bumped the generation:
			// the same case, seen earlier.
			c.stats.stale.Add(1)
			return fmt.Errorf("%w: %w", ErrStaleDelivery, err)
		}
		return fmt.Errorf("error acking delivery: %w", err)
	}
	c.stats.acked.Add(1)
	return nil
}

// nackDelivery routes a failed delivery: to the next retry tier while retries
// remain and the failure is not permanent, else to .failed. The original is
// acked only after the broker confirmed the republish; if the republish
// fails it is requeued instead.
func (c *settlement) nackDelivery(d *Delivery, reason error) error {
	if d.Generation != c.gen.Load() {
		c.stats.stale.Add(1)
		return ErrStaleDelivery
	}
	ctx := c.ctx
	headers := copyHeaders(d.Headers)
	var target string
	switch {
	case IsPermanent(reason) || d.RetryCount >= c.cfg.MaxMessageRetries:
		if !IsPermanent(reason) {
			reason = fmt.Errorf("retries exhausted after %d retries: %w", d.RetryCount, reason)
		}
		target = c.topo.Failed
		headers[HeaderFailureReason] = truncate(reason.Error(), 2048)
		headers[HeaderFailedAt] = time.Now().UTC().Format(time.RFC3339Nano)
		headers[HeaderOriginalQueue] = c.topo.Main
		c.logger.ErrorContext(ctx, "message dead-lettered", "message_id", d.MessageID, "retry_count", d.RetryCount, "reason", reason)
	default:
		delay := c.cfg.RetryDelay(d.RetryCount)
		target = c.topo.tierFor(delay).Queue
		headers[HeaderRetryCount] = int32(d.RetryCount + 1)
		headers[HeaderLastError] = truncate(reason.Error(), 1024)
		c.logger.WarnContext(ctx, "message will be retried", "message_id", d.MessageID, "retry_count", d.RetryCount+1, "delay", delay, "error", reason)
	}
	if err := c.pub.Publish(ctx, "", target, republishing(d, headers)); err != nil {
		if nerr := d.ack.Nack(d.Tag, false, true); nerr != nil {
			return fmt.Errorf("error republishing to %q (%w) and requeueing: %w", target, err, nerr)
		}
		return fmt.Errorf("error republishing to %q, requeued: %w", target, err)
	}
	if target == c.topo.Failed {
		c.stats.failed.Add(1)
	} else {
		c.stats.retried.Add(1)
	}
	return c.ackDelivery(d)
}
