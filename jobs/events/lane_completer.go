package events

import (
	"cmp"
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/tributary-run/tributary/internal/riverjob"
)

// laneCompleterMaxBatch bounds how many lane completions share one
// transaction; laneCompleterMaxCommitters how many such transactions run at
// once in one process. One runs while transactions keep finishing: a
// second starts only once a transaction has run for
// laneCompleterStallAfter with completions queued behind it (it waits for
// a lane's lock, say), so a stuck transaction delays the others by that
// much and no more. Several at once would each get a fraction of the
// batch, and a batch's statements cost about as much for a few lanes as
// for many (docs/decisions/0003-group-committer.md).
const (
	laneCompleterMaxBatch      = 200
	laneCompleterMaxCommitters = 4
	laneCompleterStallAfter    = 200 * time.Millisecond
)

// laneCompletion is one finished lane job, or the finished run of a lane
// chain (lane_chain.go), waiting for its completion transaction.
type laneCompletion struct {
	ctx context.Context
	// place is the lane and the seq of the first event handled (the head);
	// next the head after them (the last handled seq + 1).
	place riverjob.LaneSeq
	next  int64
	// attempts are the jobs to complete; events the lane events a chain
	// claimed (for processID) and handled, to delete.
	attempts []riverjob.Attempt
	events   []riverjob.LaneSeq
	// claim: take the lane events that wait at next, for processID,
	// instead of promoting them: up to this many from next on (a pending
	// dispatch job at next is promoted all the same).
	claim     int
	processID string
	// keep: the lane's next events are claimed by the chain already:
	// neither promote nor claim.
	keep bool
	// wait: wait for the transaction even if ctx ends (a chain must know
	// what it claimed).
	wait bool

	done    chan error
	claimed []riverjob.Claimed // set before done when claim > 0
}

// completionOf is the completion of a lone lane dispatch job.
func completionOf(ctx context.Context, job *river.Job[dispatchArgs]) *laneCompletion {
	a := job.Args
	return &laneCompletion{ctx: ctx,
		place:    riverjob.LaneSeq{Consumer: a.Consumer, AggregateID: a.AggregateID, Seq: a.Seq},
		next:     a.Seq + 1,
		attempts: []riverjob.Attempt{{ID: job.ID, Attempt: job.Attempt}},
		done:     make(chan error, 1)}
}

// laneCompleter group-commits lane completions: each completion is a
// transaction (advance the lane, promote the next job, complete this one),
// and one commit (one WAL flush) per job caps a busy worker at the disk's
// flush rate. Completions that arrive while a transaction runs are batched
// into the next one. A lone completion commits at once, so batching adds
// no latency when the worker is quiet; only after a batch that released
// chains that go on does the committer wait, up to a millisecond, for
// their next steps (regather). A lone completion
// is a batch of one (two round trips), where River's JobCompleteTx in a
// transaction would be five (begin, advance, promote, complete, commit).
type laneCompleter struct {
	d *Dispatcher

	mu         sync.Mutex
	queue      []*laneCompletion
	committers int
	// gather, while a committer waits for the chains its last batch
	// released (regather): closed once the queue holds gatherAt
	// completions.
	gather   chan struct{}
	gatherAt int
	// gatherFor is regather's bound (laneCompleterGather when zero).
	gatherFor time.Duration
	// progress is when a transaction last finished, or when the first
	// committer started: the clock of laneCompleterStallAfter.
	progress time.Time
}

// complete queues a lone job's completion and waits for its transaction.
func (c *laneCompleter) complete(ctx context.Context, job *river.Job[dispatchArgs]) error {
	return c.submit(completionOf(ctx, job))
}

// submit queues a completion and waits for its transaction.
func (c *laneCompleter) submit(req *laneCompletion) error {
	if c.enqueue(req) {
		go c.drain()
	}
	if req.wait {
		return <-req.done
	}
	select {
	case err := <-req.done:
		return err
	case <-req.ctx.Done():
		// The completion may still commit; if it does not, River runs the
		// job again (at-least-once).
		return req.ctx.Err()
	}
}

// enqueue queues req, ends a committer's wait for it (regather), and
// reports whether a committer must be started for it (counted already).
func (c *laneCompleter) enqueue(req *laneCompletion) (start bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.queue = append(c.queue, req)
	if c.gather != nil && len(c.queue) >= c.gatherAt {
		close(c.gather)
		c.gather = nil
	}
	if c.needCommitter(time.Now()) {
		c.committers++
		return true
	}
	return false
}

// needCommitter reports whether a queued completion needs a committer of
// its own: none runs, or none finished a transaction for
// laneCompleterStallAfter and fewer than laneCompleterMaxCommitters run.
// c.mu must be held.
func (c *laneCompleter) needCommitter(now time.Time) bool {
	if c.committers == 0 {
		c.progress = now
		return true
	}
	return c.committers < laneCompleterMaxCommitters && now.Sub(c.progress) >= laneCompleterStallAfter
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
		// Completions queued behind a transaction that gets stuck get a
		// committer of their own once it has run for
		// laneCompleterStallAfter; those queued later start one at once
		// (needCommitter).
		stall := time.AfterFunc(laneCompleterStallAfter, c.stalled)
		queued := -1
		c.commit(batch, func() {
			c.mu.Lock()
			queued = len(c.queue)
			c.mu.Unlock()
		})
		stall.Stop()
		c.mu.Lock()
		c.progress = time.Now()
		c.mu.Unlock()
		if queued >= 0 {
			c.regather(batch, queued)
		}
	}
}

// laneCompleterGather bounds how long a committer waits for the chains
// its last batch released (regather).
const laneCompleterGather = time.Millisecond

// regather waits, for up to laneCompleterGather, until the chains whose
// steps batch committed have submitted their next steps, or a full batch
// waits: queued completions were waiting when the batch's were released,
// and each step of batch whose chain goes on (it has more claimed events,
// or its claim of the next found some) will be back once its handler ran.
// Taken at once, the next batch would hold only what queued during the
// commit, and the chains of a few busy lanes settled into two groups that
// took turns, each step waiting for the other group's commit as well as
// its own: with 10 hot lanes, batches of 5 on average. A batch of lone completions, or of chains that
// ended, waits for nothing, so a quiet worker still commits a completion
// at once.
func (c *laneCompleter) regather(batch []*laneCompletion, queued int) {
	n := 0
	for _, req := range batch {
		if req.keep || len(req.claimed) > 0 {
			n++
		}
	}
	want := min(queued+n, laneCompleterMaxBatch)
	if n == 0 || queued >= want {
		return
	}
	c.mu.Lock()
	if len(c.queue) >= want {
		c.mu.Unlock()
		return
	}
	ch := make(chan struct{})
	c.gather, c.gatherAt = ch, want
	c.mu.Unlock()
	t := time.NewTimer(cmp.Or(c.gatherFor, laneCompleterGather))
	select {
	case <-ch:
	case <-t.C:
	}
	t.Stop()
	c.mu.Lock()
	if c.gather == ch {
		c.gather = nil
	}
	c.mu.Unlock()
}

// stalled starts a committer for the queued completions, if any, when a
// transaction has run for laneCompleterStallAfter.
func (c *laneCompleter) stalled() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.queue) > 0 && c.committers < laneCompleterMaxCommitters {
		c.committers++
		go c.drain()
	}
}

// commit completes a batch in one transaction, locking lanes in a fixed
// order (as the forwarder does). If the batch fails, each completion is
// retried in a transaction of its own, so one bad job does not fail the
// others.
func (c *laneCompleter) commit(batch []*laneCompletion, committed func()) {
	sort.Slice(batch, func(i, j int) bool {
		a, b := batch[i].place, batch[j].place
		return cmpLane(a.Consumer, a.AggregateID, b.Consumer, b.AggregateID) < 0
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	queues, err := c.completeTx(ctx, batch, time.Now().UTC())
	if err == nil {
		if committed != nil {
			committed()
		}
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
		queues, err := c.completeTx(ctx, []*laneCompletion{req}, time.Now().UTC())
		if err != nil {
			req.done <- fmt.Errorf("error completing dispatch in its lane: %w", err)
			continue
		}
		c.d.wakeRiver(ctx, queues...)
		req.done <- nil
	}
}

func (c *laneCompleter) completeTx(ctx context.Context, batch []*laneCompletion, now time.Time) ([]string, error) {
	places, nexts := make([]riverjob.LaneSeq, len(batch)), make([]int64, len(batch))
	var attempts []riverjob.Attempt
	var evs []riverjob.LaneSeq
	var evBy []string
	// A lane moved past its handled events either hands its next events to
	// the chain that asked for them or promotes its next dispatch; one whose
	// chain claimed them already does neither.
	var promote []riverjob.LaneSeq
	var claims []riverjob.LaneClaim
	var claimOf []int
	for i, req := range batch {
		places[i], nexts[i] = req.place, req.next
		attempts = append(attempts, req.attempts...)
		for _, ev := range req.events {
			evs, evBy = append(evs, ev), append(evBy, req.processID)
		}
		next := riverjob.LaneSeq{Consumer: req.place.Consumer, AggregateID: req.place.AggregateID, Seq: req.next}
		switch {
		case req.keep:
		case req.claim > 0:
			claims = append(claims, riverjob.LaneClaim{LaneSeq: next, Events: req.claim})
			claimOf = append(claimOf, i)
		default:
			promote = append(promote, next)
		}
	}
	// Set-based and pipelined: one statement per step for the whole batch,
	// all sent in one round trip with the transaction's start; the commit
	// (or the rollback) is the second. Each step is a statement of its own,
	// so the promotion and the claim take their snapshot after the lanes'
	// locks were granted (riverjob.PromoteNext).
	schema := c.d.cfg.Schema
	var queues []string
	var completed []int64
	got := make([][]riverjob.Claimed, len(claims))
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	// The statements go out prepared (a batch takes the connection's mode)
	// and run with their generic plans, built with sequential scans, hash
	// joins and merge joins off (genericPlanSQL), so that a plan first
	// built while the tables were small still reaches every row through an
	// index. Planned for their parameters instead (custom plans), the
	// promotion and the two claims cost 0.9 and 0.6 ms of planning a call,
	// ten times their execution, on a lone completion of an idle lane
	// that promotes and claims nothing (docs/decisions/0001-generic-plans.md).
	b.Queue(genericPlanSQL)
	c.d.lanes.queueAdvanceMany(b, places, nexts, now)
	riverjob.QueuePromoteAtHead(b, schema, promote, now, &queues)
	if len(claims) > 0 {
		// One process: every chain of this dispatcher runs in it. A place
		// holds a pending job or a lane event; one statement claims the
		// lane events and promotes the job.
		riverjob.QueueClaimAtHead(b, schema, claims, batch[claimOf[0]].processID, now, got, &queues)
	}
	// The jobs complete as River's JobCompleteTx completes them; River's
	// completer later finds them finalized and leaves them alone.
	if len(attempts) > 0 {
		riverjob.QueueCompleteRunning(b, schema, attempts, now, &completed)
	}
	var deleted int64
	if len(evs) > 0 {
		c.d.lanes.queueDeleteClaimed(b, evs, evBy, &deleted)
	}
	err := c.d.pool.AcquireFunc(ctx, func(conn *pgxpool.Conn) error {
		err := conn.SendBatch(ctx, b).Close()
		if err == nil && len(completed) != len(attempts) {
			err = fmt.Errorf("only %d of %d dispatch jobs were still running", len(completed), len(attempts))
		}
		if err == nil && deleted != int64(len(evs)) {
			err = fmt.Errorf("only %d of %d lane events were still claimed by their chain", deleted, len(evs))
		}
		end := "COMMIT"
		if err != nil {
			end = "ROLLBACK"
		}
		if _, endErr := conn.Exec(ctx, end); endErr != nil && err == nil {
			err = fmt.Errorf("error committing lane completions: %w", endErr)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	for j, i := range claimOf {
		batch[i].claimed = got[j]
	}
	return queues, nil
}

// forceCustomPlanSQL makes the rest of the transaction plan every statement
// for its parameters.
const forceCustomPlanSQL = `SELECT set_config('plan_cache_mode', 'force_custom_plan', true)`

// genericPlanSQL makes the rest of the transaction run every statement
// with its generic plan, one built with no sequential scans, hash joins or
// merge joins: those are what a plan made on small or empty tables
// chooses, and a generic plan is kept per connection after they grew.
const genericPlanSQL = `SELECT set_config('plan_cache_mode', 'force_generic_plan', true), set_config('enable_seqscan', 'off', true),
       set_config('enable_hashjoin', 'off', true), set_config('enable_mergejoin', 'off', true)`
