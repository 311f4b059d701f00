package events

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/tributary-run/tributary/internal/riverjob"
	"github.com/tributary-run/tributary/queue"
)

// The functions in this file are the operator's actions on jobs and lanes
// (the CLI's `jobs retry|cancel|delete` and `lanes`, the dashboard's
// buttons). On a job that is not a lane dispatch they are River's own
// JobRetry, JobCancel and JobDelete; on a lane dispatch they keep the lane
// right, in the same transaction as River's change:
//   - cancelling or deleting a lane's head gives its event up: the lane
//     moves on to the next event at once (a running head is cancelled
//     through its context; the dispatcher moves the lane on when the
//     handler returns). The cancelled job stays visible and replayable;
//   - retrying a lane's head that was given up (a blocked lane) runs it
//     again in its place; retrying a dispatch still waiting behind its
//     lane's head is refused (*LaneOrderError), and retrying one that was
//     cancelled before its turn puts it back in its place, pending;
//   - retrying the blocked head that River's retention deleted puts the
//     event back from the lane's copy, as a new job.
// A dispatch behind its head that is cancelled or deleted is skipped over
// by the repair sweep when the lane gets to it.

// ErrUnknownConsumer is returned (wrapped, with the name) for a consumer
// that is not in tributary_event_consumer.
var ErrUnknownConsumer = errors.New("unknown consumer")

// ErrLaneNotBlocked is returned (wrapped, naming the lane) by RetryLane and
// SkipLane for a lane that no given-up head holds.
var ErrLaneNotBlocked = errors.New("nothing to retry or skip")

// ErrBlockingJobGone is returned (wrapped) for a cancel or delete of a
// blocked lane's head that River's retention already deleted.
var ErrBlockingJobGone = errors.New("the job was deleted by River's retention and still blocks its lane")

// LaneOrderError is the refusal to retry a dispatch that waits behind its
// lane's head: running it now would run it before an earlier event.
type LaneOrderError struct {
	JobID       int64  `json:"job_id"`
	Consumer    string `json:"consumer"`
	AggregateID string `json:"aggregate_id"`
	Seq         int64  `json:"seq"`
	// HeadJobID is the job it waits behind; 0 when the head's job is gone
	// (HeadState "gone": a blocked head deleted by River's retention, which
	// a retry of the head puts back; "missing": deleted outside tributary,
	// which the repair sweep moves past).
	HeadJobID int64  `json:"head_job_id"`
	HeadSeq   int64  `json:"head_seq"`
	HeadState string `json:"head_state"`
}

func (e *LaneOrderError) Error() string {
	head := fmt.Sprintf("job %d (%s)", e.HeadJobID, e.HeadState)
	switch {
	case e.HeadJobID == 0 && e.HeadState == "gone":
		head = "its lane's blocked head, whose job River's retention deleted"
	case e.HeadJobID == 0:
		head = "its lane's head, whose job is gone (the lane repair moves past it)"
	}
	return fmt.Sprintf("job %d is event %d of aggregate %q for consumer %q and waits behind %s, event %d: retrying it now would run it out of order; retry or skip the head instead (tributary lanes retry|skip %s %s)",
		e.JobID, e.Seq, e.AggregateID, e.Consumer, head, e.HeadSeq, e.Consumer, e.AggregateID)
}

// JobActionResult is what an action on a job did.
type JobActionResult struct {
	// JobID is the job acted on (after a retry that put back a deleted
	// job, the new one).
	JobID int64
	// Job is the job after the action; for a delete, as it was; nil for a
	// skip of a lane whose blocking job River's retention deleted.
	Job *rivertype.JobRow
	// Consumer and AggregateID name the job's lane; empty for other jobs.
	Consumer    string
	AggregateID string
	// LaneReleased is true when the action moved the lane on to its next
	// event.
	LaneReleased bool
	// Requeued is true when a retry put a dispatch cancelled before its
	// turn back in its lane (pending) rather than making it available.
	Requeued bool
	// ReinsertedFrom is the blocked job River's retention had deleted, put
	// back by the retry as Job; 0 otherwise.
	ReinsertedFrom int64
}

type jobAction int

const (
	actionRetry jobAction = iota
	actionCancel
	actionDelete
)

// RetryJob makes a job available to run again, as River's JobRetry does,
// keeping its lane's order (see the file comment).
func RetryJob(ctx context.Context, client *queue.Client, id int64) (*JobActionResult, error) {
	return laneJobAction(ctx, client, id, actionRetry)
}

// CancelJob cancels a job, as River's JobCancel does; cancelling a lane's
// head moves the lane on.
func CancelJob(ctx context.Context, client *queue.Client, id int64) (*JobActionResult, error) {
	return laneJobAction(ctx, client, id, actionCancel)
}

// DeleteJob deletes a job that is not running, as River's JobDelete does;
// deleting a lane's head moves the lane on.
func DeleteJob(ctx context.Context, client *queue.Client, id int64) (*JobActionResult, error) {
	return laneJobAction(ctx, client, id, actionDelete)
}

func laneJobAction(ctx context.Context, client *queue.Client, id int64, action jobAction) (*JobActionResult, error) {
	schema := client.Schema()
	ls := newLanes(schema)
	rc := client.River()
	res := &JobActionResult{JobID: id}
	var promoted string
	err := pgx.BeginFunc(ctx, client.Pool(), func(tx pgx.Tx) error {
		p, found, err := riverjob.JobPlaceOf(ctx, tx, schema, id)
		if err != nil {
			return err
		}
		if !found {
			return goneJobAction(ctx, tx, client, ls, id, action, res)
		}
		if !p.InLane {
			res.Job, err = riverAction(ctx, tx, rc, id, action)
			return err
		}
		consumer, agg, seq := p.Place.Consumer, p.Place.AggregateID, p.Place.Seq
		res.Consumer, res.AggregateID = consumer, agg
		// The lane first, then the job: the order every lane transaction
		// takes its locks in.
		l, ok, err := ls.lock(ctx, tx, consumer, agg)
		if err != nil {
			return err
		}
		if !ok {
			// Cleaned up as idle: nothing of the lane is left to keep.
			res.Job, err = riverAction(ctx, tx, rc, id, action)
			return err
		}
		if action == actionRetry && seq > l.headSeq {
			return retryAhead(ctx, tx, rc, ls, id, consumer, agg, seq, l, res)
		}
		if res.Job, err = riverAction(ctx, tx, rc, id, action); err != nil {
			return err
		}
		if seq != l.headSeq {
			return nil
		}
		switch {
		case action == actionRetry:
			if l.blockedJobID != nil {
				err = ls.clearBlock(ctx, tx, consumer, agg, seq)
			}
			return err
		case action == actionCancel && res.Job.State == rivertype.JobStateRunning:
			// The handler's context is cancelled; the dispatcher moves the
			// lane on when it returns.
			return nil
		}
		promoted, err = ls.advance(ctx, tx, consumer, agg, seq)
		res.LaneReleased = err == nil
		return err
	})
	if err != nil {
		return nil, err
	}
	ls.wake(ctx, client.Pool(), client.Logger(), promoted, availableQueue(res.Job))
	return res, nil
}

// riverAction is River's own action on a job, in tx.
func riverAction(ctx context.Context, tx pgx.Tx, rc *river.Client[pgx.Tx], id int64, action jobAction) (*rivertype.JobRow, error) {
	switch action {
	case actionRetry:
		return rc.JobRetryTx(ctx, tx, id)
	case actionCancel:
		return rc.JobCancelTx(ctx, tx, id)
	default:
		return rc.JobDeleteTx(ctx, tx, id)
	}
}

// retryAhead handles a retry of a dispatch behind its lane's head: one
// cancelled before its turn goes back to waiting in its place; one still
// waiting (or made available outside tributary) is refused.
func retryAhead(ctx context.Context, tx pgx.Tx, rc *river.Client[pgx.Tx], ls *lanes, id int64, consumer, agg string, seq int64, l laneRow, res *JobActionResult) error {
	requeued, err := riverjob.RequeueGivenUp(ctx, tx, ls.schema, id, time.Now().UTC())
	if err != nil {
		return err
	}
	if requeued {
		res.Requeued = true
		res.Job, err = rc.JobGetTx(ctx, tx, id)
		return err
	}
	head, err := ls.headJob(ctx, tx, consumer, agg, l.headSeq)
	if err != nil {
		return err
	}
	headID, headState := head.ID, string(head.State)
	if headID == 0 {
		headState = "missing"
		if l.blockedJobID != nil {
			headState = "gone"
		}
	}
	return &LaneOrderError{JobID: id, Consumer: consumer, AggregateID: agg, Seq: seq, HeadJobID: headID, HeadSeq: l.headSeq, HeadState: headState}
}

// goneJobAction handles an action on a job that does not exist: a retry of
// a blocked head that River's retention deleted puts the event back from
// the lane's copy; a cancel or delete of one says how to give it up.
func goneJobAction(ctx context.Context, tx pgx.Tx, client *queue.Client, ls *lanes, id int64, action jobAction, res *JobActionResult) error {
	consumer, agg, found, err := ls.blockedBy(ctx, tx, id)
	if err != nil {
		return err
	}
	if !found {
		return river.ErrNotFound
	}
	if action != actionRetry {
		return fmt.Errorf("job %d: %w (aggregate %q of consumer %q): give it up with `tributary lanes skip %s %s`, or put it back with `tributary jobs retry %d`",
			id, ErrBlockingJobGone, agg, consumer, consumer, agg, id)
	}
	r, err := retryBlockedLane(ctx, tx, client, ls, consumer, agg)
	if err != nil {
		return err
	}
	*res = *r
	return nil
}

// RetryLane retries the head that blocks a lane (see RetryJob): it runs
// again in its place, and the lane moves on when it succeeds. A head River's
// retention deleted is put back from the lane's copy as a new job.
func RetryLane(ctx context.Context, client *queue.Client, consumer, aggregate string) (*JobActionResult, error) {
	ls := newLanes(client.Schema())
	var res *JobActionResult
	err := pgx.BeginFunc(ctx, client.Pool(), func(tx pgx.Tx) error {
		var err error
		res, err = retryBlockedLane(ctx, tx, client, ls, consumer, aggregate)
		return err
	})
	if err != nil {
		return nil, err
	}
	ls.wake(ctx, client.Pool(), client.Logger(), availableQueue(res.Job))
	return res, nil
}

func retryBlockedLane(ctx context.Context, tx pgx.Tx, client *queue.Client, ls *lanes, consumer, aggregate string) (*JobActionResult, error) {
	queueName, maxAttempts, limit, err := consumerQueue(ctx, tx, client.Schema(), consumer)
	if err != nil {
		return nil, err
	}
	l, err := lockBlockedLane(ctx, tx, ls, consumer, aggregate)
	if err != nil {
		return nil, err
	}
	blocked := *l.blockedJobID
	res := &JobActionResult{JobID: blocked, Consumer: consumer, AggregateID: aggregate}
	res.Job, err = client.River().JobRetryTx(ctx, tx, blocked)
	switch {
	case errors.Is(err, river.ErrNotFound):
		// River's retention deleted it; the lane kept its args.
		var args dispatchArgs
		if err := json.Unmarshal(l.blockedArgs, &args); err != nil || args.Seq != l.headSeq {
			return nil, fmt.Errorf("the lane's copy of job %d does not hold its event (aggregate %q of consumer %q): skip the lane instead", blocked, aggregate, consumer)
		}
		opts := &river.InsertOpts{Queue: queueName, MaxAttempts: maxAttempts, Metadata: laneTurnMetadata}
		if limit != "" {
			// The consumer's cap: it waits for admission (the limits'
			// middleware, if the client has one, leaves dispatch jobs alone).
			opts.Pending, opts.Metadata = true, limitMetadata(riverjob.LimitMetaName, limit, true)
		}
		ins, err := client.River().InsertTx(ctx, tx, args, opts)
		if err != nil {
			return nil, fmt.Errorf("error putting back the event of job %d: %w", blocked, err)
		}
		res.Job, res.JobID, res.ReinsertedFrom = ins.Job, ins.Job.ID, blocked
	case err != nil:
		return nil, fmt.Errorf("error retrying job %d: %w", blocked, err)
	}
	if err := ls.clearBlock(ctx, tx, consumer, aggregate, l.headSeq); err != nil {
		return nil, err
	}
	return res, nil
}

// SkipLane gives up the head that blocks a lane: the lane moves on to its
// next event at once. The given-up job stays as it is (discarded or
// cancelled, replayable with RetryJob, which then runs it out of order).
func SkipLane(ctx context.Context, client *queue.Client, consumer, aggregate string) (*JobActionResult, error) {
	ls := newLanes(client.Schema())
	res := &JobActionResult{Consumer: consumer, AggregateID: aggregate}
	var promoted string
	err := pgx.BeginFunc(ctx, client.Pool(), func(tx pgx.Tx) error {
		if _, _, _, err := consumerQueue(ctx, tx, client.Schema(), consumer); err != nil {
			return err
		}
		l, err := lockBlockedLane(ctx, tx, ls, consumer, aggregate)
		if err != nil {
			return err
		}
		res.JobID = *l.blockedJobID
		if res.Job, err = client.River().JobGetTx(ctx, tx, *l.blockedJobID); errors.Is(err, river.ErrNotFound) {
			res.Job, err = nil, nil
		}
		if err != nil {
			return err
		}
		promoted, err = ls.advance(ctx, tx, consumer, aggregate, l.headSeq)
		res.LaneReleased = err == nil
		return err
	})
	if err != nil {
		return nil, err
	}
	ls.wake(ctx, client.Pool(), client.Logger(), promoted)
	return res, nil
}

// lockBlockedLane locks a lane and checks that a given-up head blocks it.
func lockBlockedLane(ctx context.Context, tx pgx.Tx, ls *lanes, consumer, aggregate string) (laneRow, error) {
	l, ok, err := ls.lock(ctx, tx, consumer, aggregate)
	if err != nil {
		return l, err
	}
	if ok && l.blockedJobID != nil {
		return l, nil
	}
	hint := ""
	if ok && l.headSeq <= l.lastSeq {
		if head, err := ls.headJob(ctx, tx, consumer, aggregate, l.headSeq); err == nil && head.ID != 0 {
			hint = fmt.Sprintf(" (its head, job %d, is %s; cancel it to give it up)", head.ID, head.State)
		}
	}
	return l, fmt.Errorf("aggregate %q of consumer %q is not blocked%s: %w", aggregate, consumer, hint, ErrLaneNotBlocked)
}

// consumerQueue checks that consumer exists and returns its queue, its
// attempts and the limit of its MaxHandlers ("" for none).
func consumerQueue(ctx context.Context, db queue.DBTX, schema, consumer string) (q string, maxAttempts int, limit string, err error) {
	err = db.QueryRow(ctx, queue.Qualify(schema, consumerQueueSQL), consumer).Scan(&q, &maxAttempts, &limit)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", 0, "", fmt.Errorf("%w %q", ErrUnknownConsumer, consumer)
	}
	if err != nil {
		return "", 0, "", fmt.Errorf("error reading consumer %q: %w", consumer, err)
	}
	return q, maxAttempts, limit, nil
}

// BlockedLane is a lane a given-up head holds: under OrderingBlock, a
// dispatch discarded after its retries or cancelled for a validation
// failure (or by its handler), until an operator retries or skips it.
type BlockedLane struct {
	Consumer    string `json:"consumer"`
	AggregateID string `json:"aggregate_id"`
	// JobID is the blocking dispatch job; JobState its state: discarded,
	// cancelled, or "gone" once River's retention deleted it (a retry then
	// puts the event back from the lane's copy).
	JobID    int64     `json:"job_id"`
	JobState string    `json:"job_state"`
	Reason   string    `json:"reason"`
	Since    time.Time `json:"since"`
	// Seq is the blocking event's place in the lane; Waiting how many
	// events of the aggregate wait behind it.
	Seq     int64 `json:"seq"`
	Waiting int64 `json:"waiting"`
}

// String is the one-line description the CLI prints.
func (b BlockedLane) String() string {
	return fmt.Sprintf("aggregate %s of consumer %s blocked by job %d (%s since %s, %d waiting behind it): %s",
		b.AggregateID, b.Consumer, b.JobID, b.JobState, b.Since.UTC().Format(time.RFC3339), b.Waiting, b.Reason)
}

// LaneListParams select blocked lanes.
type LaneListParams struct {
	// Consumer limits the list to one consumer. Defaults to all.
	Consumer string
	// Limit is the most lanes listed, longest blocked first. Defaults to
	// 1000.
	Limit int
}

// ListBlockedLanes lists the blocked lanes, longest blocked first.
func ListBlockedLanes(ctx context.Context, db queue.DBTX, schema string, p LaneListParams) ([]BlockedLane, error) {
	if p.Limit <= 0 {
		p.Limit = 1000
	}
	return newLanes(schema).listBlocked(ctx, db, p.Consumer, p.Limit)
}

const consumerQueueSQL = `
SELECT queue, max_attempts, coalesce(limit_name, '') FROM /*schema*/tributary_event_consumer WHERE name = $1`
