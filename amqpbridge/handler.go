package amqpbridge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"runtime/debug"

	"github.com/tributary-run/tributary/internal/strictjson"
)

// HandlerFunc handles one delivery. In AutoAck mode its result decides the
// settlement: nil acks; a Permanent error, a panic, or running out of retries
// sends the message to "{name}.failed"; any other error retries it after a
// backoff. In ManualAck mode the handler settles with Delivery.Ack or
// Delivery.Nack, and an error returned without settling sends the message to
// "{name}.failed".
type HandlerFunc func(ctx context.Context, d *Delivery) error

// PermanentError marks a failure that retrying cannot fix (a malformed body,
// a validation failure): the message goes to "{name}.failed" at once.
type PermanentError struct{ Err error }

func (e *PermanentError) Error() string { return "permanent: " + e.Err.Error() }
func (e *PermanentError) Unwrap() error { return e.Err }

// Permanent wraps err so the bridge does not retry it.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &PermanentError{Err: err}
}

// IsPermanent reports whether err (or an error it wraps) is permanent.
func IsPermanent(err error) bool {
	var pe *PermanentError
	return errors.As(err, &pe)
}

// PanicError is what a recovered handler panic becomes. It is permanent.
type PanicError struct {
	Value any
	Stack []byte
}

func (e *PanicError) Error() string { return fmt.Sprintf("handler panicked: %v", e.Value) }

// JSONHandler decodes the body into T before calling fn. A body that is not
// valid JSON for T is a permanent failure: retrying cannot fix it. So is a
// body with a key repeated in an object, or with a key that matches a field
// of T only when case is ignored: encoding/json takes the last repeated key
// and folds case, other decoders keep the first key, refuse, or match case
// exactly, so another consumer could read the same bytes differently.
// Event payloads follow the same rule (the events package's strict decoding). Keys T does
// not know are ignored, unlike in event payloads: other producers (the
// Node service) may add fields to a message before its consumers know them.
func JSONHandler[T any](fn func(ctx context.Context, v T, d *Delivery) error) HandlerFunc {
	return func(ctx context.Context, d *Delivery) error {
		var v T
		if err := json.Unmarshal(d.Body, &v); err != nil {
			return Permanent(fmt.Errorf("invalid JSON body: %w", err))
		}
		if err := strictjson.CheckNamesDecoded(d.Body, reflect.TypeFor[T]()); err != nil {
			return Permanent(fmt.Errorf("ambiguous JSON body: %w", err))
		}
		return fn(ctx, v, d)
	}
}

// callHandler runs h and turns a panic into a *PanicError.
func callHandler(ctx context.Context, h HandlerFunc, d *Delivery) (err error) {
	ctx, span := startProcessSpan(ctx, d)
	defer func() {
		if r := recover(); r != nil {
			err = Permanent(&PanicError{Value: r, Stack: debug.Stack()})
		}
		endSpan(span, err)
	}()
	return h(ctx, d)
}
