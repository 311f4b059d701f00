// Package outbox names the roles of tributary's transactional outbox: the
// Event the forwarder hands on, and the destinations it hands events to
// (Publisher, TxPublisher, EventPublisher). It is a leaf, so a destination
// (the in-database bus of jobs/events, amqpbridge's Outbound, a user's own)
// implements the roles without importing the forwarder's package, and the
// forwarder (events.Forwarder) takes any of them.
//
//	type logPublisher struct{}
//
//	func (logPublisher) Name() string { return "log" }
//	func (logPublisher) PublishOutbox(ctx context.Context, evs []outbox.Event) error {
//		for _, ev := range evs {
//			slog.InfoContext(ctx, "event", "id", ev.ID, "type", ev.EventType)
//		}
//		return nil
//	}
package outbox

import (
	"context"
	"encoding/json"
	"time"

	"github.com/jackc/pgx/v5"
)

// Metadata travels with every event from emit to handler.
type Metadata struct {
	// CorrelationID ties together everything caused by one request.
	CorrelationID string `json:"correlation_id,omitempty"`
	// CausationID is the id of the message that caused this event.
	CausationID string `json:"causation_id,omitempty"`
	// Actor is who or what caused the event (a user id, a service name).
	Actor string `json:"actor,omitempty"`
	// Extra carries application-defined string attributes.
	Extra map[string]string `json:"extra,omitempty"`
	// TraceParent and TraceState are the W3C trace context of the span that
	// emitted the event (empty when no tracer provider is set): consumers'
	// handler spans and the AMQP publish of the event are its children.
	TraceParent string `json:"traceparent,omitempty"`
	TraceState  string `json:"tracestate,omitempty"`
}

// Event is one claimed tributary_outbox row as handed to publishers. Its
// JSON form is what dispatch jobs carry in their args.
type Event struct {
	ID            string          `json:"id"`
	EventType     string          `json:"event_type"`
	EventVersion  int             `json:"event_version"`
	EventKind     string          `json:"event_kind"`
	AggregateID   string          `json:"aggregate_id,omitempty"`
	Payload       json.RawMessage `json:"payload"`
	Metadata      Metadata        `json:"metadata"`
	SourceService string          `json:"source_service,omitempty"`
	CreatedAt     time.Time       `json:"created_at"`
}

// Publisher is a destination the outbox forwarder hands claimed events to:
// the in-database bus, an AMQP exchange, or anything a user writes. Name
// identifies it in the rows' record of who has an event already, so it
// must be stable and differ from the other destinations'.
//
// PublishOutbox returns nil only when every event was accepted durably by
// the destination (for a broker: confirmed). On error the forwarder treats
// the whole batch as not sent and retries it later, so a publisher must
// tolerate receiving an event it already accepted (delivery is
// at-least-once; the event ID is the idempotency key).
type Publisher interface {
	Name() string
	PublishOutbox(ctx context.Context, events []Event) error
}

// TxPublisher is a Publisher that accepts events inside the forwarder's
// transaction: the one that claims them. What the publisher writes commits
// together with the claim (and, when every destination is transactional,
// with the SENT mark), so forwarding to it is exactly-once (the in-database
// bus is one). It never waits for the plain publishers.
//
// PublishOutboxTx returns, with a nil error, what is left to do once tx has
// committed (nil for nothing); the forwarder calls it after the commit and
// never after a rollback. The bus wakes River's producers there: a NOTIFY
// inside the writing transaction would serialise every commit.
type TxPublisher interface {
	Publisher
	PublishOutboxTx(ctx context.Context, tx pgx.Tx, events []Event) (afterCommit func(context.Context), err error)
}

// EventPublisher is a plain (non-transactional) Publisher that reports an
// outcome per event, so one event it refuses (an AMQP message the broker
// returns as unroutable, one too large) fails alone instead of with its
// batch-mates. amqpbridge.Outbound is one.
//
// PublishOutboxEvents returns one error per event, in order: nil when the
// destination accepted that event durably (for a broker: confirmed). The
// forwarder calls it with at most one event per aggregate: the next event
// of an aggregate goes in a later call, and only once the destination
// accepted the one before, so a destination never gets an aggregate's
// events out of order.
type EventPublisher interface {
	Publisher
	PublishOutboxEvents(ctx context.Context, events []Event) []error
}
