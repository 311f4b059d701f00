package workflow

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/tributary-run/tributary/internal/riverjob"
	"github.com/tributary-run/tributary/jobs/events"
)

// SignalTarget says which workflow an event signals and with what payload;
// an empty ref leaves the event alone.
type SignalTarget[T any] func(msg events.Message[T]) (ref string, payload any)

// SignalFromEvent is the adapter from outbox events to signals: an events
// handler that sends the signal name to the workflow target picks (its id
// or caller key), with SignalTx in a transaction of its own. The event's
// consumer and id are the signal's idempotency key, so a redelivered event
// (events are at least once) signals once. A workflow that already
// finished is left alone; an unknown one gives the event up
// (river.JobCancel), which shows it among the consumer's failures. An AMQP
// message is turned into a signal the same way, from a handler that calls
// Signal or SignalTx.
//
//	events.On(approvals, ApprovalGiven, workflow.SignalFromEvent(wfc, "approve",
//		func(m events.Message[ApprovalGivenV1]) (string, any) { return "order-" + m.Payload.OrderID, m.Payload }))
func SignalFromEvent[T any](c *Client, name string, target SignalTarget[T]) events.HandlerFunc[T] {
	return func(ctx context.Context, msg events.Message[T]) error {
		ref, payload := target(msg)
		if ref == "" {
			return nil
		}
		key := "event:" + msg.Consumer + ":" + msg.ID
		var queues []string
		err := pgx.BeginFunc(ctx, c.qc.Pool(), func(tx pgx.Tx) error {
			_, q, err := c.signal(ctx, tx, ref, name, payload, &SignalOpts{IdempotencyKey: key})
			queues = q
			return err
		})
		var nf *NotFoundError
		switch {
		case errors.Is(err, ErrFinished):
			return nil
		case errors.As(err, &nf), errors.Is(err, ErrInvalidSignal), errors.Is(err, ErrLimit):
			return river.JobCancel(fmt.Errorf("event %s cannot become signal %q: %w", msg.ID, name, err))
		case err != nil:
			return err
		}
		c.wake(ctx, queues)
		return nil
	}
}

func (c *Client) wake(ctx context.Context, queues []string) {
	if err := riverjob.Wake(ctx, c.qc.Pool(), c.schema, queues); err != nil {
		c.logger.WarnContext(ctx, "error waking River for a signalled task", "error", err)
	}
}
