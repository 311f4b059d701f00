package events

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/tributary-run/tributary/internal/riverjob"
)

// A lane chain: once a lane's head dispatch has been handled, the worker
// that ran it runs the lane's next events too, in place, instead of
// promoting the next one and waiting for River to fetch it. The completion
// transaction that moves the lane past the head also claims what waits
// next (riverjob.QueueClaimAtHead): the lane's next lane events
// (lane_events.go), as many as chainClaim allows, in one range of their
// table, so a claim costs a statement's share per run of events rather
// than per event. The worker delivers each and records it (its lane event
// deleted, the lane moved past it, in the group commit lane completions
// share; the last one claimed also claims what follows) before it starts
// the next, until the lane has no lane event at its head, an event fails,
// the process stops, or the chain's handlers have run for
// DispatchBatchSplitAfter (DispatchBatch events in all when it never
// splits). A chain runs lane events only: a pending dispatch job at the
// head (an older version's, or one put back because it started early) is
// promoted by that claim and River runs it. An event that fails, or that
// waits for River, is a dispatch job from then on, so listing, cancelling,
// retrying and replaying work as for a lone dispatch.
//
// When the chain ends early, one transaction under the lane's lock records
// the failed event's attempt as River would (its dispatch job inserted
// retryable, discarded or cancelled; then the consumer's ordering policy,
// as for a lone dispatch), gives back the claimed lane events that did not
// run, and promotes the lane's head. The repair sweep takes back the lane
// events claimed by a process that died (claimLost, lanes.takeBack). Only
// the event that was running when the process died runs again, as for a
// lone dispatch: a lane's handlers never see an event again after its
// successor.

// chainWallFactor bounds a chain's wall time, its commits included, to
// this many DispatchBatchSplitAfter: a hot lane's chain hands its worker
// slot back now and then.
const chainWallFactor = 20

// chainClaim is how many dispatches a chain claims next, its handlers having
// run for elapsed over handled events so far: the consumer's DispatchBatch,
// fewer when the handlers' pace would run past DispatchBatchSplitAfter, and
// 0 once it has (slow handlers: one job per event, any free worker takes
// the next one). A consumer with DispatchBatch 1 never chains.
func chainClaim(c *Consumer, elapsed time.Duration, handled int) int {
	limit := c.cfg.DispatchBatch
	if !c.chains() {
		return 0
	}
	split := c.cfg.DispatchBatchSplitAfter
	if split < 0 {
		return max(0, limit-handled)
	}
	if elapsed >= split {
		return 0
	}
	if handled == 0 || elapsed <= 0 {
		return limit
	}
	per := elapsed / time.Duration(handled)
	if per <= 0 {
		return limit
	}
	return max(1, min(limit, int((split-elapsed)/per)))
}

// runChain completes the head job (handled successfully, started at start)
// and runs the lane's next events in place as long as chainClaim allows. It
// returns the head job's outcome for River: nil once the head's completion
// committed, whatever happened to the events after it.
//
// Each event is recorded (its lane event deleted, the lane moved past it) before
// the next one starts, in the group commit the lane completions share, so
// a crash redelivers at most the event that was running, never one whose
// successor a handler has seen: a lane's handlers see its events in order,
// with only immediate repeats.
func (d *Dispatcher) runChain(ctx context.Context, c *Consumer, job *river.Job[dispatchArgs], start time.Time) error {
	ch := &chain{start: time.Now(), handlers: time.Since(start)}
	claim := chainClaim(c, ch.handlers, 1)
	if claim == 0 || len(job.AttemptedBy) == 0 {
		return d.completeInLane(ctx, job)
	}
	req := completionOf(ctx, job)
	req.claim, req.processID, req.wait = claim, job.AttemptedBy[len(job.AttemptedBy)-1], true
	if err := d.completer.submit(req); err != nil {
		return recordFailed(err)
	}
	handled := 1
	claimed := req.claimed
	lane := laneKey{job.Args.Consumer, job.Args.AggregateID}
	d.chainLanes.Store(lane, struct{}{})
	defer d.chainLanes.Delete(lane)
	for len(claimed) > 0 {
		for i, cj := range claimed {
			rest := claimed[i:]
			// Only the shutdown stops a chain before an event it claimed:
			// its split and wall time stop it claiming (below), so a
			// chain runs at most the events of one claim past them.
			if ctx.Err() != nil {
				d.endChain(ctx, c, job.Args, req.processID, nil, rest)
				return nil
			}
			if ok, fail := d.deliverClaimed(ctx, c, ch, cj); !ok {
				if fail != nil {
					rest = rest[1:]
				}
				d.endChain(ctx, c, job.Args, req.processID, fail, rest)
				return nil
			}
			handled++
			last := i == len(claimed)-1
			place := riverjob.LaneSeq{Consumer: job.Args.Consumer, AggregateID: job.Args.AggregateID, Seq: cj.Seq}
			step := &laneCompletion{ctx: ctx, wait: true, done: make(chan error, 1),
				place: place, next: cj.Seq + 1, events: []riverjob.LaneSeq{place},
				keep: !last, processID: req.processID}
			// A chain that stops after this step (the shutdown, its split or
			// wall time) lets the step promote the lane's next dispatch
			// rather than claim it: no transaction of its own to give the
			// claim back.
			if last && !d.chainStops(ctx, c, ch) {
				step.claim = chainClaim(c, ch.handlers, handled)
			}
			if err := d.completer.submit(step); err != nil {
				// Not recorded: the lane event goes back with the rest, so
				// it runs again (at-least-once).
				d.logger.ErrorContext(ctx, "error recording a lane chain's progress", "consumer", job.Args.Consumer,
					"aggregate_id", job.Args.AggregateID, "error", err)
				d.endChain(ctx, c, job.Args, req.processID, nil, rest)
				return nil
			}
			if last {
				// The chain goes on with what the step claimed (nothing: the
				// step promoted the lane's next dispatch, if any).
				claimed = step.claimed
			}
		}
	}
	return nil
}

// chainFailure is a claimed event whose delivery failed.
type chainFailure struct {
	job riverjob.Claimed
	r   deliveryResult
}

// chain is a running chain's clock: when it started, and how long its
// handlers ran.
type chain struct {
	start    time.Time
	handlers time.Duration
}

// chainStops reports whether a chain claims no next event (its step then
// promotes the lane's next dispatch, and the chain ends there): the process
// is stopping, its handlers ran for DispatchBatchSplitAfter, or it ran
// chainWallFactor times that.
func (d *Dispatcher) chainStops(ctx context.Context, c *Consumer, ch *chain) bool {
	split := c.cfg.DispatchBatchSplitAfter
	return ctx.Err() != nil || (split > 0 && (ch.handlers >= split || time.Since(ch.start) >= chainWallFactor*split))
}

// deliverClaimed delivers one claimed event and reports whether it
// succeeded; a failure to record is returned, and none (nil) when the
// delivery was interrupted by the shutdown or the event cannot be decoded.
func (d *Dispatcher) deliverClaimed(ctx context.Context, c *Consumer, ch *chain, cj riverjob.Claimed) (bool, *chainFailure) {
	var args dispatchArgs
	if err := decodeDispatchArgs(cj.Args, &args); err != nil {
		// Cannot happen for a job the bus inserted; given back, it runs as a
		// lone job, which reports it.
		return false, nil
	}
	t := time.Now()
	r := d.deliver(ctx, c, &args.Event, 0, 1, cj.MaxAttempts, cj.Seq)
	ch.handlers += time.Since(t)
	if r.err == nil {
		d.chained.Add(1)
		return true, nil
	}
	if ctx.Err() != nil && r.validation == nil && !isCancel(r.err) {
		// Interrupted by the shutdown: given back without spending the
		// attempt, as River snoozes a dispatch a hard stop cancelled.
		return false, nil
	}
	return false, &chainFailure{job: cj, r: r}
}

// eventsOf is the places of a lane's claimed lane events.
func eventsOf(head dispatchArgs, cs []riverjob.Claimed) []riverjob.LaneSeq {
	out := make([]riverjob.LaneSeq, len(cs))
	for i, cj := range cs {
		out[i] = riverjob.LaneSeq{Consumer: head.Consumer, AggregateID: head.AggregateID, Seq: cj.Seq}
	}
	return out
}

// endChain records the end of a chain in one transaction under the lane's
// lock: the failed event's attempt (nil for none) with the consumer's
// ordering policy, the claimed events in rest back to pending, and the
// lane's head promoted if it waits. A failure is logged: the jobs stay
// running under this process until the liveness sweep or River's rescuer
// makes them available again.
func (d *Dispatcher) endChain(ctx context.Context, c *Consumer, head dispatchArgs, processID string, fail *chainFailure, rest []riverjob.Claimed) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	var queues []string
	blocked := false
	var err error
	if fail != nil {
		// A lane event that failed becomes a dispatch job (and maybe its
		// lane's blocked args): its event packed, as River's rows have it.
		// Once, before the tries below.
		if fail.job.Args, err = packedDispatchArgs(fail.job.Args); err != nil {
			d.logger.ErrorContext(ctx, "error encoding the dispatch of a failed lane event", "consumer", head.Consumer, "aggregate_id", head.AggregateID, "error", err)
			return
		}
	}
	// A few tries: lane events this fails to give back hold their lane
	// until the repair sweep takes them back from a chain that no longer
	// runs (claimLost).
	for try := 0; try < 5; try++ {
		if try > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(time.Duration(100<<try) * time.Millisecond):
			}
		}
		if err = d.endChainTx(ctx, c, head, processID, fail, rest, &queues, &blocked); err == nil || ctx.Err() != nil {
			break
		}
	}
	if err != nil {
		d.logger.ErrorContext(ctx, "error recording the end of a lane chain", "consumer", head.Consumer, "aggregate_id", head.AggregateID, "error", err)
		return
	}
	if blocked {
		fail.r.logger.get().WarnContext(ctx, "aggregate blocked for this consumer until the dispatch is retried or skipped (tributary lanes retry|skip)", "policy", OrderingBlock)
	}
	d.wakeRiver(ctx, queues...)
}

// endChainTx is endChain's transaction.
func (d *Dispatcher) endChainTx(ctx context.Context, c *Consumer, head dispatchArgs, processID string, fail *chainFailure, rest []riverjob.Claimed, queuesOut *[]string, blockedOut *bool) error {
	var queues []string
	blocked := false
	err := pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		queues, blocked = nil, false
		lane, ok, err := d.lanes.lock(ctx, tx, head.Consumer, head.AggregateID)
		if err != nil {
			return err
		}
		now := time.Now().UTC()
		release := false
		if fail != nil {
			var state rivertype.JobState
			var jobID int64
			state, jobID, release, err = d.failClaimed(ctx, tx, c, head, processID, fail, now)
			if err != nil {
				return err
			}
			if state != rivertype.JobStateRetryable && !release && ok && lane.headSeq == fail.job.Seq {
				reason := blockReason(fail.r, 1)
				if blocked, err = d.lanes.block(ctx, tx, head.Consumer, head.AggregateID, fail.job.Seq, jobID, reason, fail.job.Args); err != nil {
					return err
				}
			}
		}
		if err := d.lanes.unclaim(ctx, tx, eventsOf(head, rest), processID); err != nil {
			return err
		}
		if !ok {
			return nil
		}
		if release {
			q, err := d.lanes.advance(ctx, tx, head.Consumer, head.AggregateID, fail.job.Seq)
			queues = append(queues, q)
			return err
		}
		if fail == nil {
			// The head is the first claimed event not handled (now pending),
			// or one whose progress could not be recorded.
			queues, err = riverjob.PromoteNext(ctx, tx, d.cfg.Schema,
				[]riverjob.LaneSeq{{Consumer: head.Consumer, AggregateID: head.AggregateID, Seq: lane.headSeq}}, now)
			return err
		}
		return nil
	})
	if err == nil {
		*queuesOut, *blockedOut = queues, blocked
	}
	return err
}

// failClaimed records a claimed lane event's failed attempt as River's
// completer would for a lone dispatch (its dispatch job inserted in that
// state, its first attempt), and returns the state, the job's id, and
// whether the lane moves past it: the consumer skips events given up.
func (d *Dispatcher) failClaimed(ctx context.Context, tx pgx.Tx, c *Consumer, head dispatchArgs, processID string, f *chainFailure, now time.Time) (rivertype.JobState, int64, bool, error) {
	const attempt = 1
	r := f.r
	st, at := rivertype.JobStateRetryable, now.Add(c.retryDelay(attempt))
	release := false
	switch {
	case r.validation != nil || isCancel(r.err):
		st, at = rivertype.JobStateCancelled, now
		release = c.cfg.Ordering == OrderingSkip
	case r.terminal:
		st, at = rivertype.JobStateDiscarded, now
		release = c.cfg.Ordering == OrderingSkip
	}
	place := riverjob.LaneSeq{Consumer: head.Consumer, AggregateID: head.AggregateID, Seq: f.job.Seq}
	id, err := d.lanes.failEvent(ctx, tx, place, processID, c.cfg.Queue, riverjob.AttemptedJob{Kind: DispatchKind, Args: f.job.Args,
		State: st, Attempt: attempt, MaxAttempts: f.job.MaxAttempts, ScheduledAt: at, Error: attemptError(attempt, r.err), Limit: c.limitName()}, now)
	if err != nil || id == 0 {
		// id 0: the claim was taken back (the sweep took this process for
		// dead); the lane event runs again as a dispatch job.
		return rivertype.JobStateRetryable, 0, false, err
	}
	return st, id, release, nil
}
