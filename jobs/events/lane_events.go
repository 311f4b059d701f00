package events

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tributary-run/tributary/internal/riverjob"
	"github.com/tributary-run/tributary/queue"
)

// Lane events (tributary_event_lane_event, migrations 0016 and 0022): the
// bus writes the events behind a lane's head as rows of this light table
// rather than as pending dispatch jobs, for every consumer. A River
// job row is written three times (inserted pending, made running,
// completed), each time into river_job's seven indexes, GIN on args among
// them; a lane event is one row with one index.
//
// A lane chain runs a lane event in place without any River job: the
// group commit that moves the lane's head to it claims it (claimed_by, a
// HOT update), and the one that records it deletes it, guarded by the
// claim. Everything else sees a lane event only when it becomes a dispatch
// job: a promotion (riverjob.PromoteNext, QueuePromoteAtHead) inserts an
// unclaimed one's job as available, marked as its lane's turn, and deletes
// it in the same statement; a failure inside a chain inserts its job in the
// state River would have left it after that attempt (retryable, discarded,
// cancelled) and the ordering policy applies to that job as to any; the
// end of a chain unclaims what it did not run and promotes the head. So
// retries, blocked lanes, the operator's actions and replays work on jobs
// as before. A successful lane event leaves no job row (as an event of a
// batched dispatch). The repair sweep promotes an unclaimed lane event left
// at a quiet head, and takes a claimed one back from a process that died
// (or, in this process, from a chain that no longer runs) and promotes it
// (planRepair): a crash redelivers only the event that was running.

// laneEvent is one lane event as the bus writes it: the place, and the
// dispatch job's queue, max attempts and args.
type laneEvent = riverjob.LaneEvent

// newLaneEvent is the lane event of a dispatch job with args.
func newLaneEvent(args dispatchArgs, queueName string, maxAttempts int) (laneEvent, error) {
	b, err := appendLaneEventArgs(nil, &args)
	if err != nil {
		return laneEvent{}, fmt.Errorf("error encoding the dispatch of event %s: %w", args.Event.ID, err)
	}
	return laneEvent{LaneSeq: riverjob.LaneSeq{Consumer: args.Consumer, AggregateID: args.AggregateID, Seq: args.Seq},
		Queue: queueName, MaxAttempts: maxAttempts, Args: b}, nil
}

// laneEventCopyFrom is the number of lane events from which insertEvents
// writes by COPY (two round trips; Postgres inserts the rows a page at a
// time, a WAL record per page rather than per row) rather than one INSERT
// (one round trip): busCopyFrom's rule for River's jobs.
const laneEventCopyFrom = busCopyFrom

// insertEvents writes evs in tx.
func (l *lanes) insertEvents(ctx context.Context, tx pgx.Tx, evs []laneEvent) error {
	n := len(evs)
	if n == 0 {
		return nil
	}
	if n >= laneEventCopyFrom {
		_, err := riverjob.CopyLaneEvents(ctx, tx, l.schema, evs)
		return err
	}
	// Prepared (the pool's mode), so the arrays go in binary: as an
	// unnamed statement (customPlan) pgx sent them as array literals, every
	// quote of every event's JSON escaped, for Postgres to parse back; the
	// plan (an insert from unnest) is the same for every size.
	if _, err := tx.Exec(ctx, l.insertEventsSQL, insertEventsArgs(evs)...); err != nil {
		return fmt.Errorf("error inserting %d lane events: %w", n, err)
	}
	return nil
}

// queueInsertEvents queues on b the insert of evs (fewer than
// laneEventCopyFrom, at least one) by one statement, as insertEvents
// writes them.
func (l *lanes) queueInsertEvents(b *pgx.Batch, evs []laneEvent) {
	b.Queue(l.insertEventsSQL, insertEventsArgs(evs)...)
}

// insertEventsArgs are laneEventInsertSQL's arguments for evs.
func insertEventsArgs(evs []laneEvent) []any {
	n := len(evs)
	cs, as, ss, qs := make([]string, n), make([]string, n), make([]int64, n), make([]string, n)
	ms, args := make([]int32, n), make([]string, n)
	for i, ev := range evs {
		cs[i], as[i], ss[i], qs[i] = ev.Consumer, ev.AggregateID, ev.Seq, ev.Queue
		ms[i], args[i] = int32(ev.MaxAttempts), string(ev.Args)
	}
	return []any{cs, as, ss, qs, ms, args}
}

// waitingEvent is a lane event as the repair sweep sees it.
type waitingEvent struct {
	found     bool
	claimedBy string // "" when no chain claimed it
	claimedAt *time.Time
}

// eventsAt reads the lane event at each place, if any (for the repair
// sweep).
func (l *lanes) eventsAt(ctx context.Context, db queue.DBTX, places []riverjob.LaneSeq) ([]waitingEvent, error) {
	out := make([]waitingEvent, len(places))
	if len(places) == 0 {
		return out, nil
	}
	cs, as, ss := riverjob.LaneArrays(places)
	rows, err := db.Query(ctx, l.eventsAtSQL, customPlan, cs, as, ss)
	if err != nil {
		return nil, fmt.Errorf("error reading the lane events of %d lanes: %w", len(places), err)
	}
	var ord int
	var w waitingEvent
	var by *string
	_, err = pgx.ForEachRow(rows, []any{&ord, &by, &w.claimedAt}, func() error {
		w.found, w.claimedBy = true, ""
		if by != nil {
			w.claimedBy = *by
		}
		out[ord-1] = w
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("error reading the lane events of %d lanes: %w", len(places), err)
	}
	return out, nil
}

// queueDeleteClaimed queues on b the deletion of the lane events at places
// that processIDs[i] claimed (they were handled), and sets *deleted to how
// many there were when b's results are read.
func (l *lanes) queueDeleteClaimed(b *pgx.Batch, places []riverjob.LaneSeq, processIDs []string, deleted *int64) {
	cs, as, ss := riverjob.LaneArrays(places)
	b.Queue(l.deleteClaimedSQL, cs, as, ss, processIDs).Exec(func(tag pgconn.CommandTag) error {
		*deleted = tag.RowsAffected()
		return nil
	})
}

// unclaim gives back the lane events at places that processID claimed and
// did not run, in tx.
func (l *lanes) unclaim(ctx context.Context, tx pgx.Tx, places []riverjob.LaneSeq, processID string) error {
	if len(places) == 0 {
		return nil
	}
	cs, as, ss := riverjob.LaneArrays(places)
	if _, err := tx.Exec(ctx, l.unclaimSQL, cs, as, ss, processID); err != nil {
		return fmt.Errorf("error giving back %d lane events: %w", len(places), err)
	}
	return nil
}

// takeBack unclaims the lane event at place and the ones after it in its
// lane that claimedBy claimed (a chain claims a run of them at a time), for
// the repair sweep when that claimer is gone, in tx; ok is false when the
// one at place was not claimed by claimedBy any more. Taking back only the
// head would leave each of the others to a sweep of its own once the lane
// reached it: the lane stalled for a sweep's quiet time per event.
func (l *lanes) takeBack(ctx context.Context, tx pgx.Tx, place riverjob.LaneSeq, claimedBy string) (bool, error) {
	var ok bool
	err := tx.QueryRow(ctx, l.takeBackSQL, place.Consumer, place.AggregateID, place.Seq, claimedBy).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("error taking back the lane events of %s/%s from %d on: %w", place.Consumer, place.AggregateID, place.Seq, err)
	}
	return ok, nil
}

// failEvent turns a claimed lane event whose delivery failed into its
// dispatch job in the state River would have left that job in after the
// attempt (job), deleting the lane event, in tx, and returns the job's id;
// 0 when processID no longer held the claim (the sweep took it back).
func (l *lanes) failEvent(ctx context.Context, tx pgx.Tx, place riverjob.LaneSeq, processID, queueName string, job riverjob.AttemptedJob, now time.Time) (int64, error) {
	tag, err := tx.Exec(ctx, l.deleteClaimedSQL, []string{place.Consumer}, []string{place.AggregateID}, []int64{place.Seq}, []string{processID})
	if err != nil {
		return 0, fmt.Errorf("error recording the failed lane event %s/%s/%d: %w", place.Consumer, place.AggregateID, place.Seq, err)
	}
	if tag.RowsAffected() == 0 {
		return 0, nil
	}
	if err := riverjob.InsertAttempted(ctx, tx, l.schema, queueName, []riverjob.AttemptedJob{job}, now); err != nil {
		return 0, err
	}
	j, err := riverjob.LaneJobAt(ctx, tx, l.schema, place)
	if err != nil {
		return 0, err
	}
	return j.ID, nil
}

// deleteConsumerEvents deletes up to limit of consumer's lane events and
// returns how many.
func (l *lanes) deleteConsumerEvents(ctx context.Context, db queue.DBTX, consumer string, limit int) (int64, error) {
	tag, err := db.Exec(ctx, l.deleteConsumerEventsSQL, consumer, limit)
	if err != nil {
		return 0, fmt.Errorf("error deleting the lane events of consumer %q: %w", consumer, err)
	}
	return tag.RowsAffected(), nil
}

// countEvents counts each consumer's lane events (waiting dispatches
// without a job yet).
func (l *lanes) countEvents(ctx context.Context, db queue.DBTX) (map[string]int64, error) {
	rows, err := db.Query(ctx, l.countEventsSQL)
	if err != nil {
		return nil, fmt.Errorf("error counting lane events: %w", err)
	}
	out := map[string]int64{}
	var consumer string
	var n int64
	_, err = pgx.ForEachRow(rows, []any{&consumer, &n}, func() error {
		out[consumer] = n
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("error counting lane events: %w", err)
	}
	return out, nil
}

const laneEventInsertSQL = `
INSERT INTO /*schema*/` + riverjob.LaneEventTable + ` (consumer, aggregate_id, seq, queue, max_attempts, args)
SELECT c, a, s, q, m, g FROM unnest($1::text[], $2::text[], $3::bigint[], $4::text[], $5::int[], $6::text[]) AS u(c, a, s, q, m, g)`

const laneEventsAtSQL = `
SELECT u.ord, e.claimed_by, e.claimed_at FROM unnest($1::text[], $2::text[], $3::bigint[]) WITH ORDINALITY AS u(c, a, s, ord)
JOIN /*schema*/` + riverjob.LaneEventTable + ` e ON e.consumer = u.c AND e.aggregate_id = u.a AND e.seq = u.s`

const laneEventDeleteClaimedSQL = `
DELETE FROM /*schema*/` + riverjob.LaneEventTable + ` e USING unnest($1::text[], $2::text[], $3::bigint[], $4::text[]) AS u(c, a, s, p)
WHERE e.consumer = u.c AND e.aggregate_id = u.a AND e.seq = u.s AND e.claimed_by = u.p`

const laneEventUnclaimSQL = `
UPDATE /*schema*/` + riverjob.LaneEventTable + ` e SET claimed_by = NULL, claimed_at = NULL
FROM unnest($1::text[], $2::text[], $3::bigint[]) AS u(c, a, s)
WHERE e.consumer = u.c AND e.aggregate_id = u.a AND e.seq = u.s AND e.claimed_by = $4`

const laneEventTakeBackSQL = `
WITH t AS (
    UPDATE /*schema*/` + riverjob.LaneEventTable + ` e SET claimed_by = NULL, claimed_at = NULL
    WHERE e.consumer = $1 AND e.aggregate_id = $2 AND e.seq >= $3 AND e.claimed_by = $4
    RETURNING e.seq
)
SELECT coalesce(bool_or(seq = $3), false) FROM t`

const laneEventDeleteConsumerSQL = `
DELETE FROM /*schema*/` + riverjob.LaneEventTable + ` WHERE (consumer, aggregate_id, seq) IN (
    SELECT consumer, aggregate_id, seq FROM /*schema*/` + riverjob.LaneEventTable + ` WHERE consumer = $1
    LIMIT $2 FOR UPDATE)`

const laneEventCountSQL = `
SELECT consumer, count(*) FROM /*schema*/` + riverjob.LaneEventTable + ` GROUP BY consumer`
