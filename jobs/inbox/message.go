package inbox

import (
	"errors"
	"fmt"
	"time"
)

// Message is one message an inbox took in, as its handler receives it.
type Message struct {
	// ID is the message's id (AMQP: the message-id property), its
	// idempotency key: a crash can run a handler twice for one message.
	// May be empty.
	ID string
	// Type is the message's type (AMQP: the type property).
	Type string
	// CorrelationID links the message to a conversation (AMQP: the
	// correlation-id property).
	CorrelationID string
	// ContentType is the body's media type (AMQP: the content-type
	// property).
	ContentType string
	// Source is where the message came from (AMQP: the broker name of the
	// queue it was consumed from).
	Source string
	// RoutingKey is the key it was published with (AMQP).
	RoutingKey string
	// Timestamp is the message's own time (AMQP: the timestamp property),
	// in UTC; zero when it has none.
	Timestamp time.Time
	// Headers are the message's headers as JSON values: after the inbox
	// stored them, nil, bool, string, int64 (integers in int64's range),
	// float64 (other numbers), []any and map[string]any. An adapter says
	// how its protocol's values become these (amqpinbox: package doc).
	// nil when the message has none.
	Headers map[string]any
	// Body is the message's body, any bytes. A message that failed once
	// is retried from its own River job, whose args hold a JSON body as
	// JSON: a handler then gets it as PostgreSQL's jsonb gives it back, an
	// equal JSON value that may differ in spacing, key order and
	// duplicate keys; other bodies are stored in base64 and come back
	// byte for byte.
	Body []byte
	// Attempt is the handler's run for this message, 1 the first time.
	// Set by the inbox's workers; not stored.
	Attempt int

	// rawHeaders are the headers as the batch stored them, for the River
	// job of a message that failed (its args take them as they are).
	rawHeaders []byte
}

// PanicError is a handler's panic, recovered and counted as a failed
// attempt; its stack is the attempt's trace.
type PanicError struct {
	Value any
	// Stack is the handler goroutine's stack at the panic.
	Stack string
}

func (e *PanicError) Error() string { return fmt.Sprintf("handler panicked: %v", e.Value) }

// permanentError marks a handler error that no retry can fix.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// Permanent marks err, returned by a handler, as one that no retry can fix:
// the message is discarded at once (still inspectable and retryable by an
// operator, like a message whose attempts are used up) instead of retried.
// river.JobCancel(err) gives up too, leaving the message cancelled. A nil
// err stays nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

// IsPermanent reports whether err was marked by Permanent.
func IsPermanent(err error) bool {
	var pe *permanentError
	return errors.As(err, &pe)
}
