package events

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tributary-run/tributary/internal/riverjob"
	"github.com/tributary-run/tributary/queue"
)

// LaneRepairIntervalDefault is how often a dispatcher sweeps the lanes: a
// stuck head moves on 10 to 20 s after it stopped moving. A sweep reads
// only the lanes whose head has not moved for laneRepairQuietFor, one
// indexed page, so it is cheap to run often.
const LaneRepairIntervalDefault = 10 * time.Second

// laneRepairQuietFor is how long a lane's head must have stood still
// (updated_at: the head's last move, not events added behind it) before
// the repair looks at it, so it never races a completion in flight; and
// laneRepairPage how many lanes one statement of the sweep reads.
const (
	laneRepairQuietFor = 10 * time.Second
	laneRepairPage     = 500
)

// laneSnapshot is a quiet lane with work behind its head, with its head
// job, as the sweep reads it.
type laneSnapshot struct {
	consumer, aggregate string
	headSeq             int64
	updatedAt           time.Time
	blockedJobID        *int64
	ordering            Ordering

	jobID           int64      // 0: there is no job at the head
	laneEvent       bool       // no job, a lane event waits at the head
	eventClaimedBy  string     // the process whose chain claimed it; "" for none
	eventClaimedAt  *time.Time // when
	jobState        string
	cancelRequested bool // River's JobCancel marked the job
	limited         bool // it carries its consumer's limit: pending, it waits for admission
	jobArgs         []byte
	lastError       string
	attempt         int
	attemptedBy     string
	attemptedAt     *time.Time
	// orphan: the head runs under this process, for longer than the quiet
	// time, and nothing in this process runs it; or it is a lane event
	// claimed by a process that died, or by this one for longer than the
	// quiet time with no chain of it running the lane (set by the sweep).
	orphan bool
}

type repairAction int

const (
	repairNone     repairAction = iota
	repairPromote               // the head waits as pending: make it available
	repairRelease               // the head was handled or given up: move on
	repairBlock                 // a discarded head under OrderingBlock: record the block
	repairUnblock               // the recorded block's job runs again: forget the block
	repairGiveBack              // the head runs under this process, and nothing runs it: back to pending
	repairTakeBack              // a lane event claimed by a chain that no longer runs: unclaim and promote
)

func (a repairAction) String() string {
	return [...]string{"none", "promote", "release", "block", "unblock", "give back", "take back"}[a]
}

// planRepair decides what the sweep does to a lane. By construction a
// lane's head is promoted in the transaction that completes its
// predecessor, and moves on when tributary gives it up; what is left to the
// sweep is what happened outside tributary:
//   - a head still pending (a lost promotion: a job edited by hand, a bug)
//     is promoted, and so is a head that is a lane event (lane_events.go);
//     a pending head that carries its consumer's limit was promoted and
//     waits for admission (consumer_limit.go): it is left alone;
//   - a head that completed (by hand) moves the lane on;
//   - a head cancelled by an operator through River (its client or UI: the
//     job's metadata says so), or cancelled in any way the lane did not
//     record as its own block, is given up: the lane moves on;
//   - a head that is gone (deleted by hand or SQL) moves the lane on,
//     unless the lane recorded it as its block: then River's retention
//     deleted a blocked head, and the lane keeps holding, with the copy of
//     the job a retry puts back;
//   - a discarded head moves the lane on under OrderingSkip and holds it
//     under OrderingBlock (recording the block if the dispatcher could not);
//   - a recorded block whose job was retried outside tributary and is
//     waiting or running again is forgotten;
//   - a lane event at the head that a chain claimed is left to it, unless
//     the chain's process died (its heartbeat is older than the liveness
//     timeout), or the claim is this process's, older than the quiet time,
//     and no chain of this process runs the lane, or the claim is older
//     than River's rescue of stuck jobs (an hour): then it is taken back and
//     promoted, and runs again as a dispatch job (the crash redelivers it,
//     and nothing after it);
//   - a head running under this very process for longer than the quiet
//     time that nothing in this process runs (no dispatch job's Work, no
//     lane chain holds it) was lost by this process: it goes back to
//     pending, its attempt given back, and is promoted. A safety net: it
//     would otherwise hold the lane until River's rescuer (an hour), since
//     the process is alive and the liveness sweep leaves it alone.
func planRepair(s laneSnapshot) repairAction {
	if s.jobID == 0 && s.laneEvent {
		switch {
		case s.eventClaimedBy == "":
			return repairPromote
		case s.orphan:
			return repairTakeBack
		default:
			return repairNone // a live chain runs it
		}
	}
	if s.jobID == 0 {
		if s.blockedJobID != nil {
			return repairNone
		}
		return repairRelease
	}
	blockedByHead := s.blockedJobID != nil && *s.blockedJobID == s.jobID
	if s.orphan && s.jobState == "running" {
		return repairGiveBack
	}
	switch s.jobState {
	case "pending":
		if s.limited {
			return repairNone // promoted already, waiting for admission
		}
		return repairPromote
	case "completed":
		return repairRelease
	case "cancelled":
		if blockedByHead && !s.cancelRequested {
			return repairNone
		}
		return repairRelease
	case "discarded":
		switch {
		case s.ordering == OrderingSkip:
			return repairRelease
		case blockedByHead:
			return repairNone
		default:
			return repairBlock
		}
	default: // available, scheduled, retryable, running
		if s.blockedJobID != nil {
			return repairUnblock
		}
		return repairNone
	}
}

// repairLanes sweeps, once, every lane that has been quiet for 10 s with
// work behind its head (see planRepair) and returns how many lanes it moved
// on (promoted or released). Each change is made under the lane's lock
// after checking that the lane and its head are still as read, and is
// logged as a warning: it means something happened outside tributary.
func (d *Dispatcher) repairLanes(ctx context.Context) int {
	now := time.Now().UTC()
	cutoff, quietCutoff := now.Add(-laneRepairQuietFor), laneQuietCutoff(now, laneRepairQuietFor)
	moved := 0
	var after laneSnapshot
	var dead map[string]bool // read once a sweep, when a claimed lane event needs it
	for {
		page, err := d.lanes.quiet(ctx, d.pool, quietCutoff, after, laneRepairPage)
		if err != nil {
			if ctx.Err() == nil {
				d.logger.WarnContext(ctx, "error looking for stuck event lanes", "error", err)
			}
			return moved
		}
		for _, s := range page {
			s.orphan = s.jobState == "running" && s.attemptedBy != "" && s.attemptedBy == d.processID &&
				s.attemptedAt != nil && s.attemptedAt.Before(cutoff) && !d.runsJob(s.jobID)
			if s.jobID == 0 && s.eventClaimedBy != "" {
				if s.orphan, err = d.claimLost(ctx, s, cutoff, &dead); err != nil {
					d.logger.WarnContext(ctx, "error looking for dead lane chains", "error", err)
					return moved
				}
			}
			action := planRepair(s)
			if action == repairNone {
				continue
			}
			done, err := d.repairLane(ctx, s, action)
			switch {
			case err != nil:
				d.logger.WarnContext(ctx, "error repairing an event lane", "consumer", s.consumer, "aggregate_id", s.aggregate, "action", action.String(), "error", err)
			case done && (action == repairPromote || action == repairRelease):
				moved++
			}
		}
		if len(page) < laneRepairPage {
			return moved
		}
		after = page[len(page)-1]
	}
}

// errLaneChanged: the lane or its head changed since the sweep read them.
var errLaneChanged = errors.New("lane changed since it was read")

// repairLane applies action to the lane if it and its head are as the
// sweep read them; done is false when they changed (the next sweep sees
// the new state).
func (d *Dispatcher) repairLane(ctx context.Context, s laneSnapshot, action repairAction) (done bool, err error) {
	var promotedQueue string
	err = pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		l, ok, err := d.lanes.lock(ctx, tx, s.consumer, s.aggregate)
		if err != nil {
			return err
		}
		if !ok || l.headSeq != s.headSeq {
			return errLaneChanged
		}
		head, err := d.lanes.headJob(ctx, tx, s.consumer, s.aggregate, s.headSeq)
		if err != nil {
			return err
		}
		if head.ID != s.jobID || string(head.State) != s.jobState {
			return errLaneChanged
		}
		switch action {
		case repairPromote:
			if s.jobID == 0 {
				// A lane event: its job goes in available.
				queues, err := riverjob.PromoteNext(ctx, tx, d.cfg.Schema,
					[]riverjob.LaneSeq{{Consumer: s.consumer, AggregateID: s.aggregate, Seq: s.headSeq}}, time.Now().UTC())
				if err == nil && len(queues) == 0 {
					return errLaneChanged
				}
				if len(queues) > 0 {
					promotedQueue = queues[0]
				}
				return err
			}
			promotedQueue, err = riverjob.PromoteHead(ctx, tx, d.cfg.Schema, s.jobID, time.Now().UTC())
			if err == nil && promotedQueue == "" {
				return errLaneChanged
			}
			return err
		case repairRelease:
			promotedQueue, err = d.lanes.advance(ctx, tx, s.consumer, s.aggregate, s.headSeq)
			return err
		case repairBlock:
			reason := "retries used up"
			if s.lastError != "" {
				reason += ": " + s.lastError
			}
			_, err := d.lanes.block(ctx, tx, s.consumer, s.aggregate, s.headSeq, s.jobID, reason, s.jobArgs)
			return err
		case repairUnblock:
			return d.lanes.clearBlock(ctx, tx, s.consumer, s.aggregate, s.headSeq)
		case repairTakeBack:
			place := riverjob.LaneSeq{Consumer: s.consumer, AggregateID: s.aggregate, Seq: s.headSeq}
			if s.eventClaimedBy == d.processID && d.runsLane(s.consumer, s.aggregate) {
				return errLaneChanged
			}
			ok, err := d.lanes.takeBack(ctx, tx, place, s.eventClaimedBy)
			if err != nil || !ok {
				return cmp.Or(err, errLaneChanged)
			}
			queues, err := riverjob.PromoteNext(ctx, tx, d.cfg.Schema, []riverjob.LaneSeq{place}, time.Now().UTC())
			if len(queues) > 0 {
				promotedQueue = queues[0]
			}
			return err
		case repairGiveBack:
			if d.runsJob(s.jobID) {
				return errLaneChanged
			}
			now := time.Now().UTC()
			if err := riverjob.GiveBack(ctx, tx, d.cfg.Schema, []riverjob.Attempt{{ID: s.jobID, Attempt: s.attempt}}, now); err != nil {
				return err
			}
			promotedQueue, err = riverjob.PromoteHead(ctx, tx, d.cfg.Schema, s.jobID, now)
			return err
		}
		return fmt.Errorf("unknown lane repair action %d", action)
	})
	if errors.Is(err, errLaneChanged) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	attrs := []any{"consumer", s.consumer, "aggregate_id", s.aggregate, "seq", s.headSeq, "job_id", s.jobID, "job_state", s.jobState}
	switch action {
	case repairPromote:
		d.logger.WarnContext(ctx, "promoted the stuck head of an event lane", attrs...)
	case repairRelease:
		d.logger.WarnContext(ctx, "moved an event lane past a head that was handled or given up outside tributary", attrs...)
	case repairBlock:
		d.logger.WarnContext(ctx, "recorded the block of an event lane whose head was discarded", attrs...)
	case repairUnblock:
		d.logger.InfoContext(ctx, "the blocked head of an event lane runs again", attrs...)
	case repairTakeBack:
		d.logger.WarnContext(ctx, "took back the lane event at the head of a lane from a chain that no longer runs (its process died, or lost it): it runs again",
			append(attrs, "claimed_by", s.eventClaimedBy)...)
	case repairGiveBack:
		d.logger.ErrorContext(ctx, "made the head of an event lane available again: it was running under this process, which no longer ran it (a bug)", attrs...)
	}
	d.wakeRiver(ctx, promotedQueue)
	return true, nil
}

// laneEventRescueAfter is how old a lane event's claim gets before the
// sweep takes it back whatever its process: River rescues a job stuck
// running after the same hour.
const laneEventRescueAfter = time.Hour

// claimLost reports whether the chain that claimed the lane event at s's
// head no longer runs: its process died (*dead, read once per sweep), or it
// is this process, the claim is older than cutoff and no chain here runs
// the lane, or the claim is older than laneEventRescueAfter.
func (d *Dispatcher) claimLost(ctx context.Context, s laneSnapshot, cutoff time.Time, dead *map[string]bool) (bool, error) {
	if s.eventClaimedAt != nil && time.Since(*s.eventClaimedAt) > laneEventRescueAfter {
		return true, nil
	}
	if s.eventClaimedBy == d.processID {
		return s.eventClaimedAt != nil && s.eventClaimedAt.Before(cutoff) && !d.runsLane(s.consumer, s.aggregate), nil
	}
	if *dead == nil {
		ids, err := queue.StaleProcesses(ctx, d.pool, d.cfg.Schema, d.livenessTimeout)
		if err != nil {
			return false, err
		}
		*dead = map[string]bool{}
		for _, id := range ids {
			(*dead)[id] = true
		}
	}
	return (*dead)[s.eventClaimedBy], nil
}
