package amqpinbox

import (
	"context"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/tributary-run/tributary/amqpbridge"
	"github.com/tributary-run/tributary/jobs/inbox"
	"github.com/tributary-run/tributary/queue"
)

// headerBufs holds the buffers deliveries' headers are encoded into.
var headerBufs = sync.Pool{New: func() any { return new([]byte) }}

// Inserter returns an amqpbridge.InsertBatchFunc that writes each batch of
// deliveries as one batch of ib in schema's tables (a batch row for each
// inbox.BatchBytesMax of encoded messages, each with its job, one statement
// per row), in the bridge's inserting transaction; after the commit it
// wakes River's producers of the inbox's queue on db (a pool;
// amqpbridge.OnCommit). The deliveries are encoded into a reused buffer:
// the bodies are copied as they are, never parsed, and headers are encoded
// only where a delivery has some. An invalid schema name fails every batch
// (the bridge redelivers it after a backoff), naming the schema.
func Inserter(ib *inbox.Inbox, schema string, db queue.DBTX) amqpbridge.InsertBatchFunc {
	w, werr := ib.Writer(schema)
	return func(ctx context.Context, tx pgx.Tx, batch []*amqpbridge.Delivery) error {
		if werr != nil {
			return fmt.Errorf("inbox %q: %w", ib.Name(), werr)
		}
		b := inbox.NewBatch()
		defer b.Release()
		hp := headerBufs.Get().(*[]byte)
		defer headerBufs.Put(hp)
		var m inbox.Message
		for _, d := range batch {
			m = inbox.Message{ID: d.MessageID, Type: d.Type, CorrelationID: d.CorrelationID, ContentType: d.ContentType,
				Source: d.Queue, RoutingKey: d.RoutingKey, Timestamp: d.Timestamp, Body: d.Body}
			var headers []byte
			if len(d.Headers) > 0 {
				var err error
				if *hp, err = appendHeaders((*hp)[:0], d.Headers); err != nil {
					return refused(batch, fmt.Errorf("message %q: %w", d.MessageID, err))
				}
				headers = *hp
			}
			if err := b.AddEncoded(&m, headers); err != nil {
				return refused(batch, err)
			}
			if b.Size() >= inbox.BatchBytesMax {
				if _, err := w.InsertTx(ctx, tx, b); err != nil {
					return err
				}
				b.Reset()
			}
		}
		if _, err := w.InsertTx(ctx, tx, b); err != nil {
			return err
		}
		amqpbridge.OnCommit(ctx, func(ctx context.Context) {
			// Without it the batches are found at the producers' next poll.
			_ = w.Wake(ctx, db)
		})
		return nil
	}
}

// refused is the error of a batch with a delivery that can never become a
// message: permanent, so that the bridge inserts each delivery alone and
// sends the ones refused again to "{name}.failed".
func refused(batch []*amqpbridge.Delivery, err error) error {
	if len(batch) == 1 {
		return amqpbridge.Permanent(fmt.Errorf("cannot be an inbox message: %w", err))
	}
	return amqpbridge.Permanent(fmt.Errorf("a message of the batch of %d cannot be an inbox message: %w", len(batch), err))
}
