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
		last, err := encode(batch, b, func(b *inbox.Batch) (*inbox.Batch, error) {
			if _, err := w.InsertTx(ctx, tx, b); err != nil {
				return nil, err
			}
			b.Reset()
			return b, nil
		})
		if err != nil {
			return err
		}
		if _, err := w.InsertTx(ctx, tx, last); err != nil {
			return err
		}
		amqpbridge.OnCommit(ctx, func(ctx context.Context) {
			// Without it the batches are found at the producers' next poll.
			_ = w.Wake(ctx, db)
		})
		return nil
	}
}

// Statements returns an amqpbridge.InsertStatementsFunc that writes each
// batch of deliveries as Inserter does, the batch rows (each with its job)
// queued as statements, and the wake of River's producers of the inbox's
// queue as an after-commit statement: the bridge sends BEGIN, the rows,
// COMMIT and the wake in one round trip, where Inserter takes four (BEGIN,
// insert, COMMIT, and the wake on another connection). Use it in
// amqpbridge.InboundConfig.InsertStatements; Inserter is for an insert
// that writes something else in the same transaction.
func Statements(ib *inbox.Inbox, schema string) amqpbridge.InsertStatementsFunc {
	w, werr := ib.Writer(schema)
	var wakeSQL string
	var wakeArgs []any
	if werr == nil {
		wakeSQL, wakeArgs = w.WakeStatement()
	}
	return func(_ context.Context, s *amqpbridge.Statements, batch []*amqpbridge.Delivery) error {
		if werr != nil {
			return fmt.Errorf("inbox %q: %w", ib.Name(), werr)
		}
		// Each row's buffer is sent after this returns: a batch of its own
		// for each, released once sent.
		queue := func(b *inbox.Batch) {
			sql, args := w.InsertStatement(b)
			s.Queue(sql, args...)
		}
		b := inbox.NewBatch()
		s.AfterSend(b.Release)
		b, err := encode(batch, b, func(b *inbox.Batch) (*inbox.Batch, error) {
			queue(b)
			next := inbox.NewBatch()
			s.AfterSend(next.Release)
			return next, nil
		})
		if err != nil {
			return err
		}
		if b.Len() > 0 {
			queue(b)
		}
		if wakeSQL != "" {
			s.AfterCommit(wakeSQL, wakeArgs...)
		}
		return nil
	}
}

// encode adds batch's deliveries to b as inbox messages. Whenever b holds
// inbox.BatchBytesMax bytes or more, full gets it and returns the batch to
// go on with. It returns the last batch, which full did not get.
func encode(batch []*amqpbridge.Delivery, b *inbox.Batch, full func(*inbox.Batch) (*inbox.Batch, error)) (*inbox.Batch, error) {
	hp := headerBufs.Get().(*[]byte)
	defer headerBufs.Put(hp)
	// Room for the bodies and their fields (headers aside), up to a row.
	size := 0
	for _, d := range batch {
		size += len(d.Body) + len(d.MessageID) + len(d.Type) + len(d.CorrelationID) + 16
	}
	b.Grow(min(size, inbox.BatchBytesMax))
	var m inbox.Message
	for _, d := range batch {
		m = inbox.Message{ID: d.MessageID, Type: d.Type, CorrelationID: d.CorrelationID, ContentType: d.ContentType,
			Source: d.Queue, RoutingKey: d.RoutingKey, Timestamp: d.Timestamp, Body: d.Body}
		var headers []byte
		if len(d.Headers) > 0 {
			var err error
			if *hp, err = appendHeaders((*hp)[:0], d.Headers); err != nil {
				return b, refused(batch, fmt.Errorf("message %q: %w", d.MessageID, err))
			}
			headers = *hp
		}
		if err := b.AddEncoded(&m, headers); err != nil {
			return b, refused(batch, err)
		}
		if b.Size() >= inbox.BatchBytesMax {
			var err error
			if b, err = full(b); err != nil {
				return b, err
			}
		}
	}
	return b, nil
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
