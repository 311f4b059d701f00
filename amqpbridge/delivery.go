package amqpbridge

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Header names shared with the Node service.
const (
	// HeaderRetryCount counts how often a message was retried.
	HeaderRetryCount = "x-retry-count"
	// HeaderFailureReason says why a message is in "{name}.failed".
	HeaderFailureReason = "x-failure-reason"
	// HeaderFailedAt is when a message was dead-lettered (RFC 3339).
	HeaderFailedAt = "x-failed-at"
	// HeaderOriginalQueue is the queue a dead-lettered message came from.
	HeaderOriginalQueue = "x-original-queue"
	// HeaderLastError is the error that caused the latest retry.
	HeaderLastError = "x-last-error"
)

// ErrAlreadySettled is returned by a second Ack or Nack of one delivery. The
// second call sends nothing to the broker (a double ack would make the broker
// close the channel).
var ErrAlreadySettled = errors.New("delivery already settled")

// ErrStaleDelivery is returned when settling a delivery whose channel is gone
// (the consumer reconnected since). Nothing is sent: the broker redelivers
// the message, and the tag could belong to another message on the new
// channel.
var ErrStaleDelivery = errors.New("delivery is from a previous channel generation; dropped")

// Delivery is one message handed to a handler.
type Delivery struct {
	// Queue is the broker name of the queue it came from.
	Queue         string
	Body          []byte
	Headers       amqp.Table
	MessageID     string
	CorrelationID string
	ContentType   string
	Type          string
	Exchange      string
	RoutingKey    string
	Timestamp     time.Time
	Redelivered   bool
	// RetryCount is the x-retry-count header (0 when absent).
	RetryCount int
	// Generation is the consumer channel generation the delivery came from.
	Generation uint64
	// Tag is the broker's delivery tag on that channel.
	Tag uint64

	// The rest of what a Nack republishes (republishing), kept instead of
	// the whole amqp.Delivery: a delivery is allocated per message, and
	// the smaller one halved its size.
	contentEncoding, replyTo, userID, appID string
	priority                                uint8
	ack                                     amqp.Acknowledger

	owner   settler
	settled atomic.Bool
}

// settler is the consumer side of Ack and Nack.
type settler interface {
	ackDelivery(d *Delivery) error
	nackDelivery(d *Delivery, reason error) error
}

// Ack acknowledges the delivery. Only the first Ack or Nack takes effect.
func (d *Delivery) Ack() error {
	if !d.settled.CompareAndSwap(false, true) {
		return ErrAlreadySettled
	}
	return d.owner.ackDelivery(d)
}

// Nack settles the delivery as failed with reason: a Permanent reason (or no
// retries left) sends it to "{name}.failed", otherwise it is retried after a
// backoff. Only the first Ack or Nack takes effect.
func (d *Delivery) Nack(reason error) error {
	if !d.settled.CompareAndSwap(false, true) {
		return ErrAlreadySettled
	}
	if reason == nil {
		reason = errors.New("nacked by handler")
	}
	return d.owner.nackDelivery(d, reason)
}

// Settled reports whether Ack or Nack was called.
func (d *Delivery) Settled() bool { return d.settled.Load() }

func newDelivery(queue string, gen uint64, raw amqp.Delivery, owner settler) *Delivery {
	return &Delivery{
		Queue:           queue,
		Body:            raw.Body,
		Headers:         raw.Headers,
		MessageID:       raw.MessageId,
		CorrelationID:   raw.CorrelationId,
		ContentType:     raw.ContentType,
		Type:            raw.Type,
		Exchange:        raw.Exchange,
		RoutingKey:      raw.RoutingKey,
		Timestamp:       raw.Timestamp,
		Redelivered:     raw.Redelivered,
		RetryCount:      RetryCount(raw.Headers),
		Generation:      gen,
		Tag:             raw.DeliveryTag,
		contentEncoding: raw.ContentEncoding,
		replyTo:         raw.ReplyTo,
		userID:          raw.UserId,
		appID:           raw.AppId,
		priority:        raw.Priority,
		ack:             raw.Acknowledger,
		owner:           owner,
	}
}

// RetryCount reads the x-retry-count header whatever numeric type the
// publisher used (amqplib, for one, picks the type from the value), as a
// count in 0..math.MaxInt32.
//
// A value below zero, NaN, or one that is not a number counts as 0, the
// same as no header: the message gets the configured retries from the
// start. Trusting it would be worse either way: a negative count from
// another producer would buy about 2^31 retries, and refusing the message
// would dead-letter it before its handler ever ran. A value above
// math.MaxInt32 (what the header is written as) counts as math.MaxInt32,
// which is past any retry limit.
func RetryCount(h amqp.Table) int {
	switch v := h[HeaderRetryCount].(type) {
	case int:
		return clampCount(int64(v))
	case int8:
		return clampCount(int64(v))
	case int16:
		return clampCount(int64(v))
	case int32:
		return clampCount(int64(v))
	case int64:
		return clampCount(v)
	case uint8:
		return clampCount(int64(v))
	case uint16:
		return clampCount(int64(v))
	case uint32:
		return clampCount(int64(v))
	case uint64:
		return clampCount(int64(min(v, math.MaxInt32)))
	case float32:
		return clampFloatCount(float64(v))
	case float64:
		return clampFloatCount(v)
	case amqp.Decimal:
		return clampFloatCount(float64(v.Value) / math.Pow10(int(v.Scale)))
	case string:
		return parseCount(v)
	case []byte:
		return parseCount(string(v))
	default:
		return 0
	}
}

func clampCount(n int64) int {
	return int(max(0, min(n, math.MaxInt32)))
}

func clampFloatCount(f float64) int {
	switch {
	case math.IsNaN(f) || f <= 0:
		return 0
	case f >= math.MaxInt32:
		return math.MaxInt32
	default:
		return int(f)
	}
}

// parseCount reads a count written as text; digits beyond what int64 holds
// are still a large count, not garbage.
func parseCount(s string) int {
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil {
		var nerr *strconv.NumError
		if errors.As(err, &nerr) && errors.Is(nerr.Err, strconv.ErrRange) && !strings.HasPrefix(strings.TrimSpace(s), "-") {
			return math.MaxInt32
		}
		return 0
	}
	return clampCount(n)
}

// republishing builds the message to publish elsewhere (retry tier, .failed,
// replay) from a delivery, with its properties and a copy of its headers.
func republishing(d *Delivery, headers amqp.Table) amqp.Publishing {
	return amqp.Publishing{
		Headers:         headers,
		ContentType:     d.ContentType,
		ContentEncoding: d.contentEncoding,
		DeliveryMode:    amqp.Persistent,
		Priority:        d.priority,
		CorrelationId:   d.CorrelationID,
		ReplyTo:         d.replyTo,
		MessageId:       d.MessageID,
		Timestamp:       d.Timestamp,
		Type:            d.Type,
		UserId:          d.userID,
		AppId:           d.appID,
		Body:            d.Body,
	}
}

func copyHeaders(h amqp.Table) amqp.Table {
	out := make(amqp.Table, len(h)+4)
	for k, v := range h {
		out[k] = v
	}
	return out
}

// truncate keeps header values small.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + fmt.Sprintf("... (%d bytes)", len(s))
}
