package amqpbridge

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/tributary-run/tributary/queue"
)

// OutboundConfig configures an Outbound publisher.
type OutboundConfig struct {
	// Exchange receives the events. Required.
	Exchange string
	// ExchangeKind is used when the exchange is declared. Defaults to "topic".
	ExchangeKind string
	// AllowUnroutable accepts events no queue is bound for. By default such
	// an event is an error (the broker returns it), so the outbox row is not
	// marked SENT while nothing can receive it.
	AllowUnroutable bool
}

// Outbound is the outbound bridge: a queue.OutboxPublisher that publishes each
// outbox event to an exchange with the event type as routing key. It returns
// nil only after the broker confirmed every event, so the forwarder marks a
// row SENT only once RabbitMQ has it.
type Outbound struct {
	pub *Publisher
	oc  OutboundConfig

	mu       sync.Mutex
	declared bool
}

var _ queue.OutboxPublisher = (*Outbound)(nil)

// NewOutbound returns an outbound bridge publishing through pub.
func NewOutbound(pub *Publisher, oc OutboundConfig) (*Outbound, error) {
	if pub == nil {
		return nil, errors.New("outbound bridge needs a publisher")
	}
	if oc.Exchange == "" {
		return nil, errors.New("outbound bridge needs an exchange name")
	}
	oc.ExchangeKind = cmp.Or(oc.ExchangeKind, amqp.ExchangeTopic)
	return &Outbound{pub: pub, oc: oc}, nil
}

// Name implements queue.OutboxPublisher.
func (o *Outbound) Name() string { return "amqp exchange " + o.oc.Exchange }

// Headers set on every outbound event message.
const (
	HeaderEventID       = "event_id"
	HeaderEventVersion  = "event_version"
	HeaderEventKind     = "event_kind"
	HeaderAggregateID   = "aggregate_id"
	HeaderCausationID   = "causation_id"
	HeaderActor         = "actor"
	HeaderSourceService = "source_service"
)

// PublishOutbox implements queue.OutboxPublisher. The message body is the
// event payload; the event id is the message id (the consumers' idempotency
// key), the correlation id travels as the AMQP correlation id, the rest as
// headers.
func (o *Outbound) PublishOutbox(ctx context.Context, events []queue.OutboxEvent) error {
	if err := o.declare(ctx); err != nil {
		return err
	}
	msgs := make([]Message, len(events))
	for i, ev := range events {
		h := amqp.Table{
			HeaderEventID:      ev.ID,
			HeaderEventVersion: int32(ev.EventVersion),
		}
		for k, v := range map[string]string{
			HeaderEventKind: ev.EventKind, HeaderAggregateID: ev.AggregateID, HeaderCausationID: ev.Metadata.CausationID,
			HeaderActor: ev.Metadata.Actor, HeaderSourceService: ev.SourceService,
		} {
			if v != "" {
				h[k] = v
			}
		}
		for k, v := range ev.Metadata.Extra {
			h["x-meta-"+k] = v
		}
		msgs[i] = Message{Exchange: o.oc.Exchange, RoutingKey: ev.EventType, Publishing: amqp.Publishing{
			ContentType:   "application/json",
			MessageId:     ev.ID,
			CorrelationId: ev.Metadata.CorrelationID,
			Type:          ev.EventType,
			Timestamp:     ev.CreatedAt,
			Headers:       h,
			Body:          ev.Payload,
		}}
	}
	if !o.oc.AllowUnroutable {
		if err := o.pub.PublishMany(ctx, msgs); err != nil {
			return fmt.Errorf("error publishing %d events to exchange %q: %w", len(events), o.oc.Exchange, err)
		}
		return nil
	}
	for _, m := range msgs {
		err := o.pub.Publish(ctx, m.Exchange, m.RoutingKey, m.Publishing)
		var unroutable *UnroutableError
		if err != nil && !errors.As(err, &unroutable) {
			return fmt.Errorf("error publishing event %s to exchange %q: %w", m.Publishing.MessageId, o.oc.Exchange, err)
		}
	}
	return nil
}

// declare declares the exchange (durable) until that succeeded once.
func (o *Outbound) declare(ctx context.Context) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.declared {
		return nil
	}
	err := o.pub.withChannel(func(ch *amqp.Channel) error {
		return ch.ExchangeDeclare(o.oc.Exchange, o.oc.ExchangeKind, true, false, false, false, nil)
	})
	if err != nil {
		return fmt.Errorf("error declaring exchange %q: %w", o.oc.Exchange, err)
	}
	o.declared = true
	return nil
}
