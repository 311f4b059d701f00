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
	job  *river.Job[DispatchArgs]
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
func (c *laneCompleter) complete(ctx context.Context, job *river.Job[DispatchArgs]) error {
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
	queues := map[string]bool{}
	err := pgx.BeginFunc(ctx, c.d.pool, func(tx pgx.Tx) error {
		for _, req := range batch {
			q, err := c.d.advanceLane(ctx, tx, req.job.Args)
			if err != nil {
				return err
			}
			if q != "" {
				queues[q] = true
			}
			// The job's own context: River finds its client (and the
			// worker's metadata updates) there.
			if _, err := river.JobCompleteTx[*riverpgxv5.Driver](req.ctx, tx, req.job); err != nil {
				return fmt.Errorf("error completing job %d: %w", req.job.ID, err)
			}
		}
		return nil
	})
	out := make([]string, 0, len(queues))
	for q := range queues {
		out = append(out, q)
	}
	return out, err
}
