package amqpbridge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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

func (c *settlement) ackDelivery(d *Delivery) error {
	if d.Generation != c.gen.Load() {
		c.stats.stale.Add(1)
		return ErrStaleDelivery
	}
	if err := d.raw.Acknowledger.Ack(d.Tag, false); err != nil {
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
	if err := c.pub.Publish(ctx, "", target, republishing(d.raw, headers)); err != nil {
		if nerr := d.raw.Acknowledger.Nack(d.Tag, false, true); nerr != nil {
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
