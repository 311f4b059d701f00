package amqpbridge

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/tributary-run/tributary/outbox"
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

// Outbound is the outbound bridge: a outbox.Publisher that publishes each
// outbox event to an exchange with the event type as routing key. An event
// counts as delivered only once the broker confirmed it, so the forwarder
// marks a row SENT only once RabbitMQ has it; the outcome is per event
// (PublishOutboxEvents), so an unroutable event fails alone.
type Outbound struct {
	pub *Publisher
	oc  OutboundConfig

	mu       sync.Mutex
	declared bool
}

var _ outbox.Publisher = (*Outbound)(nil)

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

// Name implements outbox.Publisher.
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

// PublishOutbox implements outbox.Publisher: nil only when every
// event was confirmed, else the first event's error (see
// PublishOutboxEvents).
func (o *Outbound) PublishOutbox(ctx context.Context, events []outbox.Event) error {
	for _, err := range o.PublishOutboxEvents(ctx, events) {
		if err != nil {
			return err
		}
	}
	return nil
}

var _ outbox.EventPublisher = (*Outbound)(nil)

// PublishOutboxEvents publishes every event and returns its outcome, one
// error per event in order (it implements the events forwarder's
// EventPublisher): nil once the broker confirmed the event, an
// *UnroutableError (wrapped) for an event no queue is bound for (nil with
// AllowUnroutable), ErrNotConfirmed for a nack or a lost channel,
// ErrMessageTooLarge, or the context's error when ctx ended before the
// confirm. The events are in flight together (up to the publisher's
// ConfirmWindow), so one refused event costs its batch-mates nothing.
//
// The message body is the event payload; the event id is the message id
// (the consumers' idempotency key), the correlation id travels as the AMQP
// correlation id, the rest as headers.
func (o *Outbound) PublishOutboxEvents(ctx context.Context, events []outbox.Event) []error {
	errs := make([]error, len(events))
	if err := o.declare(ctx); err != nil {
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	type inFlight struct {
		i  int
		pd *Pending
	}
	var pending []inFlight
	settle := func(f inFlight) {
		err := f.pd.Wait(ctx)
		var unroutable *UnroutableError
		if errors.As(err, &unroutable) && o.oc.AllowUnroutable {
			err = nil
		}
		errs[f.i] = o.eventError(events[f.i], err)
	}
	for i, ev := range events {
		if len(pending) == o.pub.cfg.ConfirmWindow {
			settle(pending[0])
			pending = pending[1:]
		}
		m := outboundMessage(o.oc.Exchange, ev)
		pd, err := o.pub.PublishDeferred(ctx, m.Exchange, m.RoutingKey, m.Publishing)
		if err != nil {
			errs[i] = o.eventError(ev, err)
			continue
		}
		pending = append(pending, inFlight{i: i, pd: pd})
	}
	for _, f := range pending {
		settle(f)
	}
	return errs
}

func (o *Outbound) eventError(ev outbox.Event, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("error publishing event %s (%s) to exchange %q: %w", ev.ID, ev.EventType, o.oc.Exchange, err)
}

// outboundMessage is the message of one outbox event.
func outboundMessage(exchange string, ev outbox.Event) Message {
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
	if ev.Metadata.TraceParent != "" { // the publish becomes a child of the emit span
		h[HeaderTraceParent] = ev.Metadata.TraceParent
		if ev.Metadata.TraceState != "" {
			h[HeaderTraceState] = ev.Metadata.TraceState
		}
	}
	return Message{Exchange: exchange, RoutingKey: ev.EventType, Publishing: amqp.Publishing{
		ContentType:   "application/json",
		MessageId:     ev.ID,
		CorrelationId: ev.Metadata.CorrelationID,
		Type:          ev.EventType,
		Timestamp:     ev.CreatedAt,
		Headers:       h,
		Body:          ev.Payload,
	}}
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
