package amqpbridge

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// ErrQueueNotFound is returned by the DLQ tools for a queue the broker does
// not have.
var ErrQueueNotFound = errors.New("queue not found")

// ErrInvalidReplayTarget is returned (wrapped, naming the target) by
// ReplayTo for a target that is not a queue consumers read.
var ErrInvalidReplayTarget = errors.New("invalid replay target")

// FailedMessage is one message in a "{name}.failed" queue.
type FailedMessage struct {
	MessageID     string     `json:"message_id,omitempty"`
	Reason        string     `json:"reason,omitempty"`
	RetryCount    int        `json:"retry_count"`
	FailedAt      string     `json:"failed_at,omitempty"`
	OriginalQueue string     `json:"original_queue,omitempty"`
	Timestamp     time.Time  `json:"timestamp,omitzero"`
	Body          string     `json:"body"`
	Headers       amqp.Table `json:"-"`
}

// DLQ lists and replays the failed messages of logical queues.
type DLQ struct {
	cfg Config
}

// NewDLQ returns the DLQ tools for cfg.
func NewDLQ(cfg Config) (*DLQ, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &DLQ{cfg: cfg.withDefaults()}, nil
}

// ListLimitDefault is how many failed messages List returns by default.
const ListLimitDefault = 100

// topology accepts a logical name ("orders") or the failed queue's own name
// ("orders.failed"), both without the prefix.
func (q *DLQ) topology(name string) Topology {
	return q.cfg.Topology(strings.TrimSuffix(name, ".failed"))
}

func (q *DLQ) open(ctx context.Context, topo Topology) (*amqp.Connection, *amqp.Channel, int, error) {
	conn, err := dial(q.cfg, q.cfg.ConnectionName+".dlq")
	if err != nil {
		return nil, nil, 0, err
	}
	ch, err := conn.Channel()
	if err != nil {
		_ = conn.Close()
		return nil, nil, 0, fmt.Errorf("error opening channel: %w", err)
	}
	info, err := ch.QueueDeclarePassive(topo.Failed, true, false, false, false, nil)
	if err != nil {
		_ = conn.Close()
		var aerr *amqp.Error
		if errors.As(err, &aerr) && aerr.Code == amqp.NotFound {
			return nil, nil, 0, fmt.Errorf("%w: %q has no failed-message queue %q (check the name and QUEUE_PREFIX %q)", ErrQueueNotFound, topo.Main, topo.Failed, q.cfg.QueuePrefix)
		}
		return nil, nil, 0, fmt.Errorf("error inspecting %q: %w", topo.Failed, err)
	}
	return conn, ch, info.Messages, nil
}

// List returns up to limit messages of name's failed queue without removing
// them (they are fetched unacked and released when the channel closes), and
// the queue's total depth.
func (q *DLQ) List(ctx context.Context, name string, limit int) ([]FailedMessage, int, error) {
	limit = cmp.Or(limit, ListLimitDefault)
	topo := q.topology(name)
	conn, ch, depth, err := q.open(ctx, topo)
	if err != nil {
		return nil, 0, err
	}
	defer func() { _ = conn.Close() }()
	var out []FailedMessage
	for len(out) < limit && len(out) < depth {
		if err := ctx.Err(); err != nil {
			return out, depth, err
		}
		d, ok, err := ch.Get(topo.Failed, false)
		if err != nil {
			return out, depth, fmt.Errorf("error reading %q: %w", topo.Failed, err)
		}
		if !ok {
			break
		}
		out = append(out, failedMessage(d))
	}
	// Closing the channel returns every fetched message to the queue.
	if err := ch.Close(); err != nil {
		return out, depth, fmt.Errorf("error releasing listed messages: %w", err)
	}
	return out, depth, nil
}

func failedMessage(d amqp.Delivery) FailedMessage {
	return FailedMessage{
		MessageID:     d.MessageId,
		Reason:        headerStr(d.Headers, HeaderFailureReason),
		RetryCount:    RetryCount(d.Headers),
		FailedAt:      headerStr(d.Headers, HeaderFailedAt),
		OriginalQueue: headerStr(d.Headers, HeaderOriginalQueue),
		Timestamp:     d.Timestamp,
		Body:          string(d.Body),
		Headers:       d.Headers,
	}
}

func headerStr(h amqp.Table, key string) string {
	switch v := h[key].(type) {
	case string:
		return v
	case []byte:
		return string(v)
	default:
		return ""
	}
}

// Replay moves up to limit messages (all when limit is 0) from name's failed
// queue back to name's main queue with the retry count reset and the failure
// headers removed. Each message is acked in the failed queue only after the
// broker confirmed its republish, so a crash replays it twice at worst,
// never loses it. It returns how many were replayed.
//
// The x-original-queue header of a message is not followed: anyone who can
// publish to the failed queue could set it and redirect the replay into any
// queue. A message whose header names another queue is replayed into name's
// main queue all the same, with a warning; ReplayTo chooses another target
// explicitly.
func (q *DLQ) Replay(ctx context.Context, name string, limit int) (int, error) {
	return q.ReplayTo(ctx, name, "", limit)
}

// ReplayTo is Replay into the logical queue target (QueuePrefix applies)
// instead of name's own main queue; an empty target is name. The target must
// exist and must not be a failed queue.
func (q *DLQ) ReplayTo(ctx context.Context, name, target string, limit int) (int, error) {
	topo := q.topology(name)
	conn, ch, depth, err := q.open(ctx, topo)
	if err != nil {
		return 0, err
	}
	defer func() { _ = conn.Close() }()
	dest := topo.Main
	if target != "" {
		if dest, err = q.replayTarget(conn, target); err != nil {
			return 0, err
		}
	}
	pub := newPublisher(q.cfg, q.cfg.ConnectionName+".dlq.publisher")
	defer func() { _ = pub.Stop(context.Background()) }()
	if limit <= 0 {
		limit = depth
	}
	n := 0
	for n < limit {
		if err := ctx.Err(); err != nil {
			return n, err
		}
		d, ok, err := ch.Get(topo.Failed, false)
		if err != nil {
			return n, fmt.Errorf("error reading %q: %w", topo.Failed, err)
		}
		if !ok {
			break
		}
		if orig := headerStr(d.Headers, HeaderOriginalQueue); orig != "" && orig != dest {
			q.cfg.Logger.WarnContext(ctx, "failed message names another original queue; replaying it into the target",
				"message_id", d.MessageId, "x_original_queue", orig, "target", dest)
		}
		headers := copyHeaders(d.Headers)
		for _, k := range []string{HeaderFailureReason, HeaderFailedAt, HeaderOriginalQueue, HeaderLastError, "x-death", "x-first-death-exchange", "x-first-death-queue", "x-first-death-reason", "x-last-death-exchange", "x-last-death-queue", "x-last-death-reason"} {
			delete(headers, k)
		}
		headers[HeaderRetryCount] = int32(0)
		if err := pub.Publish(ctx, "", dest, republishing(newDelivery(topo.Failed, 0, d, nil), headers)); err != nil {
			_ = d.Nack(false, true)
			return n, fmt.Errorf("error replaying message %q to %q: %w", d.MessageId, dest, err)
		}
		if err := d.Ack(false); err != nil {
			return n, fmt.Errorf("replayed message %q but could not remove it from %q (it will be replayed again): %w", d.MessageId, topo.Failed, err)
		}
		n++
	}
	q.cfg.Logger.InfoContext(ctx, "replayed failed messages", "queue", topo.Failed, "target", dest, "count", n)
	return n, nil
}

// maxQueueNameBytes is AMQP's limit on a queue name (a short string).
const maxQueueNameBytes = 255

// replayTarget checks an explicit replay target and returns its broker name.
// It is checked on its own channel: a passive declare of a missing queue
// closes the channel it ran on.
func (q *DLQ) replayTarget(conn *amqp.Connection, target string) (string, error) {
	dest := q.cfg.QueueName(target)
	switch {
	case strings.TrimSpace(target) != target:
		return "", fmt.Errorf("%w %q: leading or trailing space", ErrInvalidReplayTarget, target)
	case len(dest) > maxQueueNameBytes:
		return "", fmt.Errorf("%w %q: the queue name %q is over %d bytes", ErrInvalidReplayTarget, target, dest, maxQueueNameBytes)
	case strings.HasSuffix(dest, ".failed"):
		return "", fmt.Errorf("%w %q: it is a failed-message queue; replay into a queue that consumers read", ErrInvalidReplayTarget, target)
	}
	ch, err := conn.Channel()
	if err != nil {
		return "", fmt.Errorf("error opening channel: %w", err)
	}
	defer func() { _ = ch.Close() }()
	if _, err := ch.QueueDeclarePassive(dest, true, false, false, false, nil); err != nil {
		var aerr *amqp.Error
		if errors.As(err, &aerr) && aerr.Code == amqp.NotFound {
			return "", fmt.Errorf("%w: replay target %q (queue %q) does not exist", ErrQueueNotFound, target, dest)
		}
		return "", fmt.Errorf("error inspecting replay target %q: %w", dest, err)
	}
	return dest, nil
}
