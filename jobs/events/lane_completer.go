package events

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/tributary-run/tributary/internal/riverjob"
)

// laneCompleterMaxBatch bounds how many lane completions share one
// transaction; laneCompleterMaxCommitters how many such transactions run at
// once in one process.
const (
	laneCompleterMaxBatch      = 200
	laneCompleterMaxCommitters = 4
)

// laneCompletion is one finished lane job waiting for its completion
// transaction.
type laneCompletion struct {
	ctx  context.Context
	job  *river.Job[dispatchArgs]
	done chan error
}

// laneCompleter group-commits lane completions: each completion is a
// transaction (advance the lane, promote the next job, complete this one),
// and one commit (one WAL flush) per job caps a busy worker at the disk's
// flush rate. Completions that arrive while a transaction runs are batched
// into the next one. There is no timer: a lone completion commits at once,
// so batching adds no latency when the worker is quiet.
type laneCompleter struct {
	d *Dispatcher

	mu         sync.Mutex
	queue      []*laneCompletion
	committers int
}

// complete queues a completion and waits for its transaction.
func (c *laneCompleter) complete(ctx context.Context, job *river.Job[dispatchArgs]) error {
	req := &laneCompletion{ctx: ctx, job: job, done: make(chan error, 1)}
	c.mu.Lock()
	c.queue = append(c.queue, req)
	if c.committers < laneCompleterMaxCommitters {
		c.committers++
		go c.drain()
	}
	c.mu.Unlock()
	select {
	case err := <-req.done:
		return err
	case <-ctx.Done():
		// The completion may still commit; if it does not, River runs the
		// job again (at-least-once).
		return ctx.Err()
	}
}

func (c *laneCompleter) drain() {
	for {
		c.mu.Lock()
		if len(c.queue) == 0 {
			c.committers--
			c.mu.Unlock()
			return
		}
		n := min(len(c.queue), laneCompleterMaxBatch)
		batch := make([]*laneCompletion, n)
		copy(batch, c.queue[:n])
		c.queue = c.queue[n:]
		c.mu.Unlock()
		c.commit(batch)
	}
}

// commit completes a batch in one transaction, locking lanes in a fixed
// order (as the forwarder does). If the batch fails, each completion is
// retried in a transaction of its own, so one bad job does not fail the
// others.
func (c *laneCompleter) commit(batch []*laneCompletion) {
	sort.Slice(batch, func(i, j int) bool {
		a, b := batch[i].job.Args, batch[j].job.Args
		if a.Consumer != b.Consumer {
			return a.Consumer < b.Consumer
		}
		return a.AggregateID < b.AggregateID
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	queues, err := c.completeTx(ctx, batch)
	if err == nil {
		c.d.wakeRiver(ctx, queues...)
		for _, req := range batch {
			req.done <- nil
		}
		return
	}
	if len(batch) == 1 {
		batch[0].done <- fmt.Errorf("error completing dispatch in its lane: %w", err)
		return
	}
	for _, req := range batch {
		queues, err := c.completeTx(ctx, []*laneCompletion{req})
		if err != nil {
			req.done <- fmt.Errorf("error completing dispatch in its lane: %w", err)
			continue
		}
		c.d.wakeRiver(ctx, queues...)
		req.done <- nil
	}
}

func (c *laneCompleter) completeTx(ctx context.Context, batch []*laneCompletion) ([]string, error) {
	if len(batch) == 1 {
		return c.completeOneTx(ctx, batch[0])
	}
	places, attempts := make([]riverjob.LaneSeq, len(batch)), make([]riverjob.Attempt, len(batch))
	for i, req := range batch {
		a := req.job.Args
		places[i] = riverjob.LaneSeq{Consumer: a.Consumer, AggregateID: a.AggregateID, Seq: a.Seq}
		attempts[i] = riverjob.Attempt{ID: req.job.ID, Attempt: req.job.Attempt}
	}
	var queues []string
	err := pgx.BeginFunc(ctx, c.d.pool, func(tx pgx.Tx) error {
		// Set-based: one statement per step for the whole batch, lanes
		// locked in the forwarder's order first.
		var err error
		if queues, err = c.d.lanes.advanceMany(ctx, tx, places); err != nil {
			return err
		}
		// The jobs complete as River's JobCompleteTx completes them; River's
		// completer later finds them finalized and leaves them alone.
		completed, err := riverjob.CompleteRunning(ctx, tx, c.d.cfg.Schema, attempts, time.Now().UTC())
		if err != nil {
			return err
		}
		if len(completed) != len(attempts) {
			return fmt.Errorf("only %d of %d dispatch jobs were still running", len(completed), len(attempts))
		}
		return nil
	})
	return queues, err
}

// completeOneTx completes one lane job with River's own JobCompleteTx.
func (c *laneCompleter) completeOneTx(ctx context.Context, req *laneCompletion) ([]string, error) {
	var q string
	err := pgx.BeginFunc(ctx, c.d.pool, func(tx pgx.Tx) error {
		var err error
		a := req.job.Args
		if q, err = c.d.lanes.advance(ctx, tx, a.Consumer, a.AggregateID, a.Seq); err != nil {
			return err
		}
		// The job's own context: River finds its client (and the worker's
		// metadata updates) there.
		if _, err := river.JobCompleteTx[*riverpgxv5.Driver](req.ctx, tx, req.job); err != nil {
			return fmt.Errorf("error completing job %d: %w", req.job.ID, err)
		}
		return nil
	})
	if q == "" {
		return nil, err
	}
	return []string{q}, err
}
