package queue

import (
	"context"
	"encoding/json"
	"time"
)

// EventMetadata travels with every event from emit to handler.
type EventMetadata struct {
	// CorrelationID ties together everything caused by one request.
	CorrelationID string `json:"correlation_id,omitempty"`
	// CausationID is the id of the message that caused this event.
	CausationID string `json:"causation_id,omitempty"`
	// Actor is who or what caused the event (a user id, a service name).
	Actor string `json:"actor,omitempty"`
	// Extra carries application-defined string attributes.
	Extra map[string]string `json:"extra,omitempty"`
}

// OutboxEvent is one claimed tributary_outbox row as handed to publishers.
type OutboxEvent struct {
	ID            string          `json:"id"`
	EventType     string          `json:"event_type"`
	EventVersion  int             `json:"event_version"`
	EventKind     string          `json:"event_kind"`
	AggregateID   string          `json:"aggregate_id,omitempty"`
	Payload       json.RawMessage `json:"payload"`
	Metadata      EventMetadata   `json:"metadata"`
	SourceService string          `json:"source_service,omitempty"`
	CreatedAt     time.Time       `json:"created_at"`
}

// OutboxPublisher is a destination the outbox forwarder hands claimed events
// to: the in-database bus, an AMQP exchange, or anything a user writes.
//
// PublishOutbox returns nil only when every event was accepted durably by the
// destination (for a broker: confirmed). On error the forwarder treats the
// whole batch as not sent and retries it later, so a publisher must tolerate
// receiving an event it already accepted (delivery is at-least-once; the
// event ID is the idempotency key).
type OutboxPublisher interface {
	Name() string
	PublishOutbox(ctx context.Context, events []OutboxEvent) error
}
