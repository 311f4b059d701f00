package amqpbridge

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// InsertStatementsFunc writes a batch of deliveries as statements queued on
// s instead of run on a transaction: the inbound bridge sends them between
// a BEGIN and a COMMIT, followed by the statements queued with
// Statements.AfterCommit, in one round trip to Postgres (an InsertBatchFunc
// costs at least three: BEGIN, its statements, COMMIT). It suits an insert
// whose statements do not depend on each other's results, such as an
// inbox's batch rows (jobs/inbox/amqpinbox.Statements). A Permanent error
// means a delivery can never be inserted, as for an InsertBatchFunc.
type InsertStatementsFunc func(ctx context.Context, s *Statements, batch []*Delivery) error

// Statements are the statements of one inserting transaction, sent in one
// round trip (InsertStatementsFunc).
type Statements struct {
	tx, after pgx.Batch
	sent      []func()
}

// Queue adds a statement to the transaction. Its arguments are encoded
// when the statements are sent, after the InsertStatementsFunc returned:
// a buffer they point into must stay as it is until then (AfterSend).
func (s *Statements) Queue(sql string, args ...any) { s.tx.Queue(sql, args...) }

// AfterCommit adds a statement that runs once the transaction committed,
// in a transaction of its own, in the same round trip: a NOTIFY, say,
// which inside a writing transaction would hold Postgres's notify lock
// through the commit. It is best effort: the batch counts as inserted
// once the COMMIT succeeded, whatever this statement does.
func (s *Statements) AfterCommit(sql string, args ...any) { s.after.Queue(sql, args...) }

// AfterSend registers fn to run once the statements were sent and their
// results read, whether they succeeded or not: where an argument's buffer
// goes back to a pool.
func (s *Statements) AfterSend(fn func()) { s.sent = append(s.sent, fn) }

// batchSender is what the statements are sent with: a *pgxpool.Pool.
type batchSender interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// sendStatements runs insert for batch and sends what it queued: BEGIN,
// the statements, COMMIT and the after-commit statements, as one pipeline.
// A failure before the COMMIT completed leaves the connection in a failed
// transaction; the pool closes a connection it gets back in that state, so
// nothing of the batch stays behind.
func sendStatements(ctx context.Context, db batchSender, insert InsertStatementsFunc, batch []*Delivery) error {
	var s Statements
	defer func() {
		for _, fn := range s.sent {
			fn()
		}
	}()
	hooks := &commitHooks{}
	if err := insert(context.WithValue(ctx, commitHooksKey{}, hooks), &s, batch); err != nil {
		return err
	}
	if s.tx.Len() > 0 {
		if err := s.send(ctx, db); err != nil {
			return err
		}
	}
	for _, fn := range hooks.fns {
		fn(ctx)
	}
	return nil
}

func (s *Statements) send(ctx context.Context, db batchSender) error {
	n := s.tx.Len()
	b := &pgx.Batch{QueuedQueries: make([]*pgx.QueuedQuery, 0, n+2+s.after.Len())}
	b.Queue("BEGIN")
	b.QueuedQueries = append(b.QueuedQueries, s.tx.QueuedQueries...)
	b.Queue("COMMIT")
	b.QueuedQueries = append(b.QueuedQueries, s.after.QueuedQueries...)
	br := db.SendBatch(ctx, b)
	defer func() { _ = br.Close() }() // after the COMMIT, an after-commit statement's error is not the batch's
	if _, err := br.Exec(); err != nil {
		return fmt.Errorf("error beginning insert transaction: %w", err)
	}
	for i := range n {
		if _, err := br.Exec(); err != nil {
			return fmt.Errorf("error inserting deliveries (statement %d of %d): %w", i+1, n, err)
		}
	}
	if _, err := br.Exec(); err != nil {
		return fmt.Errorf("error committing inserted deliveries: %w", err)
	}
	return nil
}
