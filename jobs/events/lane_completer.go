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
	if len(batch) == 1 {
		return c.completeOneTx(ctx, batch[0])
	}
	n := len(batch)
	consumers, aggs, seqs, ids := make([]string, n), make([]string, n), make([]int64, n), make([]int64, n)
	for i, req := range batch {
		a := req.job.Args
		consumers[i], aggs[i], seqs[i], ids[i] = a.Consumer, a.AggregateID, a.Seq, req.job.ID
	}
	var queues []string
	err := pgx.BeginFunc(ctx, c.d.pool, func(tx pgx.Tx) error {
		now := time.Now().UTC()
		// Lock the lanes in the forwarder's order first, so the two never
		// wait for each other in a cycle.
		if _, err := tx.Exec(ctx, c.d.lockLanesSQL, customPlan, consumers, aggs); err != nil {
			return fmt.Errorf("error locking lanes: %w", err)
		}
		// Set-based: one statement per step for the whole batch. The
		// promotion is a statement of its own, for the fresh snapshot.
		if _, err := tx.Exec(ctx, c.d.advanceManySQL, customPlan, consumers, aggs, seqs, now); err != nil {
			return fmt.Errorf("error advancing lanes: %w", err)
		}
		rows, err := tx.Query(ctx, c.d.promoteManySQL, customPlan, consumers, aggs, seqs, now)
		if err != nil {
			return fmt.Errorf("error promoting the next dispatches: %w", err)
		}
		if queues, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
			return fmt.Errorf("error promoting the next dispatches: %w", err)
		}
		// Complete the jobs as River's JobCompleteTx does (running ->
		// completed); River's completer later finds them finalized and
		// leaves them alone.
		var completed int
		if err := tx.QueryRow(ctx, c.d.completeManySQL, customPlan, ids, now).Scan(&completed); err != nil {
			return fmt.Errorf("error completing dispatch jobs: %w", err)
		}
		if completed != n {
			return fmt.Errorf("only %d of %d dispatch jobs were still running", completed, n)
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
		if q, err = c.d.lanes.advanceLane(ctx, tx, a.Consumer, a.AggregateID, a.Seq); err != nil {
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

const lockLanesSQL = `
SELECT 1 FROM /*schema*/tributary_event_lane l
JOIN unnest($1::text[], $2::text[]) AS u(c, a) ON l.consumer = u.c AND l.aggregate_id = u.a
ORDER BY l.consumer, l.aggregate_id
FOR UPDATE OF l`

const laneAdvanceManySQL = `
UPDATE /*schema*/tributary_event_lane l
SET head_seq = l.head_seq + 1, updated_at = $4,
    blocked_job_id = NULL, blocked_reason = NULL, blocked_since = NULL, blocked_args = NULL
FROM unnest($1::text[], $2::text[], $3::bigint[]) AS u(c, a, s)
WHERE l.consumer = u.c AND l.aggregate_id = u.a AND l.head_seq = u.s`

// lanePromoteManySQL promotes, for each lane this batch advanced past its
// job, the dispatch now at the head. The pending job is looked up per lane
// in a LATERAL subquery (LIMIT 1 keeps the planner from flattening it),
// which always probes tributary_dispatch_lane_idx with the lane's key. As
// a plain join, Postgres plans it, while river_job has no statistics yet,
// as a walk of the whole partial index for each batch (docs/BENCHMARKS.md,
// "Plans of the events statements").
const lanePromoteManySQL = `
UPDATE /*schema*/river_job j
SET state = 'available', scheduled_at = $4, metadata = j.metadata || '{"tributary_lane_turn": true}'
FROM unnest($1::text[], $2::text[], $3::bigint[]) AS u(c, a, s)
JOIN /*schema*/tributary_event_lane l ON l.consumer = u.c AND l.aggregate_id = u.a AND l.head_seq = u.s + 1
CROSS JOIN LATERAL (
    SELECT p.id FROM /*schema*/river_job p
    WHERE p.state = 'pending' AND p.kind = 'tributary.event.dispatch'
      AND (p.args ->> 'consumer') = u.c AND (p.args ->> 'aggregate_id') = u.a AND ((p.args ->> 'seq')::bigint) = u.s + 1
    LIMIT 1
) next
WHERE j.id = next.id AND j.state = 'pending'
RETURNING j.queue`

const completeManySQL = `
WITH done AS (
    UPDATE /*schema*/river_job SET state = 'completed', finalized_at = $2
    WHERE id = ANY($1::bigint[]) AND state = 'running'
    RETURNING 1
)
SELECT count(*) FROM done`
