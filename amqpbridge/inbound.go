package amqpbridge

import (
	"cmp"
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/tributary-run/tributary/queue"
)

// InsertBatchFunc inserts what a batch of deliveries becomes (jobs, staged
// items) in tx. A Permanent error means a delivery can never be inserted.
type InsertBatchFunc func(ctx context.Context, tx pgx.Tx, batch []*Delivery) error

// InsertFunc inserts what one delivery becomes in tx.
type InsertFunc func(ctx context.Context, tx pgx.Tx, d *Delivery) error

// PerDelivery adapts an InsertFunc to an InsertBatchFunc. Each delivery is
// inserted in a span of its own, a child of the span its headers carry.
func PerDelivery(fn InsertFunc) InsertBatchFunc {
	return func(ctx context.Context, tx pgx.Tx, batch []*Delivery) error {
		for _, d := range batch {
			dctx, span := startProcessSpan(ctx, d) // the message's own trace
			err := fn(dctx, tx, d)
			endSpan(span, err)
			if err != nil {
				return err
			}
		}
		return nil
	}
}

// Inbound bridge defaults.
const (
	InboundPrefetchDefault    = 1000
	InboundConcurrencyDefault = 4
	// InboundStatementsConcurrencyDefault is the concurrency's default with
	// InsertStatements: a batch's transaction is one round trip, so two at
	// once keep the broker's window moving, with batches twice as large
	// as four would have, and fewer goroutines and connections competing
	// for the CPU (`tributary bench amqp`, its inbox side).
	InboundStatementsConcurrencyDefault = 2
)

// InboundConfig configures an Inbound bridge.
type InboundConfig struct {
	// Queue is the logical queue to read. Required.
	Queue string
	// DB starts the inserting transactions (a *pgxpool.Pool). Required.
	DB queue.DBTX
	// Insert inserts a batch in the transaction; see JobInserter. Set it
	// or InsertStatements.
	Insert InsertBatchFunc
	// InsertStatements, instead of Insert, queues the statements that
	// insert a batch; the bridge sends them with BEGIN and COMMIT in one
	// round trip (see jobs/inbox/amqpinbox.Statements). DB must then send
	// a pgx.Batch (a *pgxpool.Pool does).
	InsertStatements InsertStatementsFunc
	// Prefetch is the channel's prefetch: the most unacked messages held
	// in memory. Defaults to 1000; lower it for large messages (it bounds
	// messages, not bytes: 1000 messages of MaxMessageBytes each are 1 GiB).
	Prefetch int
	// Concurrency is how many batches are inserted at once, each in its own
	// transaction; they are acked in order. Defaults to 4, or 2 with
	// InsertStatements.
	Concurrency int
	// BatchSize is the most deliveries one transaction inserts. Defaults to
	// Prefetch / Concurrency, so the broker keeps every inserter busy.
	BatchSize int
}

// WithDefaults returns ic with Prefetch, Concurrency and BatchSize set as
// NewInbound uses them (Concurrency's default depends on whether
// InsertStatements is set).
func (ic InboundConfig) WithDefaults() InboundConfig {
	ic.Prefetch = cmp.Or(ic.Prefetch, InboundPrefetchDefault)
	if ic.InsertStatements != nil {
		ic.Concurrency = cmp.Or(ic.Concurrency, InboundStatementsConcurrencyDefault)
	}
	ic.Concurrency = cmp.Or(ic.Concurrency, InboundConcurrencyDefault)
	ic.BatchSize = cmp.Or(ic.BatchSize, max(1, ic.Prefetch/max(1, ic.Concurrency)))
	return ic
}

// Inbound is the inbound bridge: it turns a queue's messages into rows (River
// jobs, staged batch items) and acks them only after the inserting
// transaction committed. Deliveries are inserted in batches of what is
// waiting (one transaction, one multiple-ack); a delivery whose insert fails
// permanently goes to "{name}.failed" with the reason and the rest of its
// batch is inserted without it. Any other failure rolls back and redelivers
// the batch after a backoff. Delivery is at-least-once: a crash between
// commit and ack inserts again, so jobs should use the message id for
// uniqueness where duplicates matter.
type Inbound struct {
	*BatchConsumer
}

// NewInbound returns an inbound bridge.
func NewInbound(cfg Config, ic InboundConfig) (*Inbound, error) {
	if ic.DB == nil || (ic.Insert == nil) == (ic.InsertStatements == nil) {
		return nil, fmt.Errorf("inbound bridge for queue %q needs a database and one insert function (Insert or InsertStatements)", ic.Queue)
	}
	write := func(ctx context.Context, batch []*Delivery) error { return insertTx(ctx, ic.DB, ic.Insert, batch) }
	if ic.InsertStatements != nil {
		db, ok := ic.DB.(batchSender)
		if !ok {
			return nil, fmt.Errorf("inbound bridge for queue %q: InsertStatements needs a database that sends a pgx.Batch (a *pgxpool.Pool), not a %T", ic.Queue, ic.DB)
		}
		write = func(ctx context.Context, batch []*Delivery) error {
			return sendStatements(ctx, db, ic.InsertStatements, batch)
		}
	}
	ic = ic.WithDefaults()
	in := &Inbound{}
	bc, err := NewBatchConsumer(cfg, BatchConsumerConfig{
		Queue:              ic.Queue,
		MaxEvents:          ic.BatchSize,
		Prefetch:           ic.Prefetch,
		HandOffConcurrency: ic.Concurrency,
		MaxBytes:           1 << 62,
		FlushWhenIdle:      true,
		Name:               "amqp inbound " + cfg.QueueName(ic.Queue),
		HandOff: func(ctx context.Context, batch []*Delivery) error {
			return insertBatch(ctx, write, batch)
		},
	})
	if err != nil {
		return nil, err
	}
	in.BatchConsumer = bc
	return in, nil
}

// insertBatch inserts batch in one transaction; when a permanent failure
// spoils it, each delivery is tried alone so only the bad ones are failed.
func insertBatch(ctx context.Context, write func(context.Context, []*Delivery) error, batch []*Delivery) error {
	err := write(ctx, batch)
	if err == nil || !IsPermanent(err) {
		return err
	}
	if len(batch) == 1 {
		return batch[0].Nack(err)
	}
	for _, d := range batch {
		err := write(ctx, []*Delivery{d})
		switch {
		case err == nil:
		case IsPermanent(err):
			if nerr := d.Nack(err); nerr != nil {
				return nerr
			}
		default:
			return err
		}
	}
	return nil
}

func insertTx(ctx context.Context, db queue.DBTX, insert InsertBatchFunc, batch []*Delivery) error {
	tx, err := db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("error beginning insert transaction: %w", err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	hooks := &commitHooks{}
	if err := insert(context.WithValue(ctx, commitHooksKey{}, hooks), tx, batch); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("error committing inserted deliveries: %w", err)
	}
	for _, fn := range hooks.fns {
		fn(ctx)
	}
	return nil
}

// JobEnqueuer is the part of queue.Client the job inserter needs.
type JobEnqueuer interface {
	EnqueueManyTx(ctx context.Context, tx pgx.Tx, items []queue.EnqueueItem) (int, error)
}

// JobInserter returns an InsertBatchFunc that turns each delivery's JSON body
// into the arguments of a job of kind, inserted with the client's
// EnqueueManyTx (for queue.Client, one COPY of the rows River writes). A
// body that is empty, not JSON, or JSON that River's jsonb column cannot
// hold (a \u0000 escape, say: queue.CheckArgs) is a permanent failure: its
// insert would fail every time, and roll back the rest of its batch with it.
// The body is checked once, by the enqueue (queue.CheckArgs, which reports
// it as a *queue.ArgsError), not again here: on this path the JSON checks
// are the largest cost of the process after the broker's frames.
func JobInserter(client JobEnqueuer, kind string, opts *queue.EnqueueOpts) InsertBatchFunc {
	return func(ctx context.Context, tx pgx.Tx, batch []*Delivery) error {
		items := make([]queue.EnqueueItem, len(batch))
		for i, d := range batch {
			if len(d.Body) == 0 { // RawArgs would store it as {}
				return Permanent(fmt.Errorf("message %q has an empty body, not JSON for job kind %q", d.MessageID, kind))
			}
			items[i] = queue.EnqueueItem{Args: queue.RawArgs{KindName: kind, JSON: d.Body}, Opts: opts}
		}
		_, err := client.EnqueueManyTx(ctx, tx, items)
		var argsErr *queue.ArgsError
		switch {
		case err == nil:
			return nil
		case errors.As(err, &argsErr) && len(batch) == 1:
			return Permanent(fmt.Errorf("message %q: %w", batch[0].MessageID, err))
		case errors.As(err, &argsErr):
			// insertBatch tries each delivery alone, naming the bad ones.
			return Permanent(fmt.Errorf("a message of the batch of %d: %w", len(batch), err))
		default:
			return fmt.Errorf("error inserting %d %q jobs: %w", len(items), kind, err)
		}
	}
}
