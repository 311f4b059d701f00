package events

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river/rivertype"

	"github.com/tributary-run/tributary/internal/riverjob"
	"github.com/tributary-run/tributary/queue"
)

// A lane (tributary_event_lane) is a consumer's ordering of one aggregate's
// events: its dispatch jobs have the sequence numbers head_seq..last_seq,
// the head is the one job that may run, the rest wait in River's pending
// state. The lane moves on (head_seq + 1, the next job promoted to
// available) when its head succeeds, and when the head is given up: under
// OrderingSkip when it fails for good, under any policy when an operator
// cancels, deletes or skips it. Under OrderingBlock a head that fails for
// good holds the lane and the lane records it (blocked_job_id, the reason,
// since when, and a copy of the job's args), until an operator retries or
// skips it.
//
// The lanes type below is the one owner of the lane table and of a lane's
// moves: every statement on tributary_event_lane (but the idle lanes'
// clean-up, retention.go) is here, for the bus (reserve), the dispatcher
// (advance, block, the guard), the group commit (queueAdvanceMany), the repair
// sweep (quiet) and the operator actions alike. Its River side (promote,
// look up, put back) is riverjob's. Every transaction that locks a lane
// locks it before any of its jobs, and several lanes in (consumer,
// aggregate_id) order, so lane transactions never wait for each other in a
// cycle.

// laneTurnMetadata is the metadata of a dispatch job inserted as its lane's
// head (riverjob.LaneTurnKey).
var laneTurnMetadata = []byte(`{"` + riverjob.LaneTurnKey + `": true}`)

// hadLaneTurn reports whether a dispatch job's metadata carries the mark:
// a lane's head only moves forward, so a marked job is the head or behind it
// (a replay) and may run. Only an unmarked lane job that starts (made
// available outside tributary) costs the dispatcher a look at its lane.
func hadLaneTurn(metadata []byte) bool {
	var m map[string]json.RawMessage
	return json.Unmarshal(metadata, &m) == nil && string(m[riverjob.LaneTurnKey]) == "true"
}

// laneKey names a lane.
type laneKey struct{ consumer, aggregate string }

// laneRange is a lane's sequence numbers reserved for one publish: next is
// the first, head the lane's head when they were reserved.
type laneRange struct{ next, head int64 }

// laneRow is a lane as read under its row lock.
type laneRow struct {
	headSeq, lastSeq int64
	blockedJobID     *int64
	blockedReason    string
	blockedSince     *time.Time
	blockedArgs      []byte
}

// lanes is the lanes of one schema: their statements, qualified once.
type lanes struct {
	schema string

	reserveSQL, lastSQL, advanceSQL, advanceManySQL, lockSQL, headSQL string
	blockSQL, clearBlockSQL, quietSQL, blockedByJobSQL, blockedSQL    string
	blockedJobsSQL, deleteConsumerSQL                                 string

	insertEventsSQL, eventsAtSQL, deleteConsumerEventsSQL, countEventsSQL string // lane_events.go
	deleteClaimedSQL, unclaimSQL, takeBackSQL                             string
}

func newLanes(schema string) *lanes {
	q := func(sql string) string { return queue.Qualify(schema, sql) }
	return &lanes{
		schema:     schema,
		reserveSQL: q(laneReserveSQL), lastSQL: q(laneLastSQL), advanceSQL: q(laneAdvanceSQL),
		advanceManySQL: q(laneAdvanceManySQL),
		lockSQL:        q(laneLockSQL), headSQL: q(laneHeadSQL),
		blockSQL: q(laneBlockSQL), clearBlockSQL: q(laneClearBlockSQL),
		quietSQL: q(laneQuietSQL), blockedByJobSQL: q(laneBlockedByJobSQL),
		blockedSQL: q(laneBlockedSQL), blockedJobsSQL: q(laneBlockedJobsSQL),
		deleteConsumerSQL: q(laneDeleteConsumerSQL),
		insertEventsSQL:   q(laneEventInsertSQL), eventsAtSQL: q(laneEventsAtSQL),
		deleteConsumerEventsSQL: q(laneEventDeleteConsumerSQL), countEventsSQL: q(laneEventCountSQL),
		deleteClaimedSQL: q(laneEventDeleteClaimedSQL), unclaimSQL: q(laneEventUnclaimSQL),
		takeBackSQL: q(laneEventTakeBackSQL),
	}
}

// reserve adds counts[k] sequence numbers to each lane k (creating it at
// head 1), locking the lanes in their fixed order, and returns each lane's
// reserved range.
func (l *lanes) reserve(ctx context.Context, tx pgx.Tx, counts map[laneKey]int64) (map[laneKey]laneRange, error) {
	b := &pgx.Batch{}
	out := l.queueReserve(b, counts)
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return nil, err
	}
	return out, nil
}

// queueReserve queues reserve's statement on b and returns the map it fills
// with the reserved ranges when b's results are read.
func (l *lanes) queueReserve(b *pgx.Batch, counts map[laneKey]int64) map[laneKey]laneRange {
	keys := make([]laneKey, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b laneKey) int {
		return cmpLane(a.consumer, a.aggregate, b.consumer, b.aggregate)
	})
	cs, as, ns := make([]string, len(keys)), make([]string, len(keys)), make([]int64, len(keys))
	for i, k := range keys {
		cs[i], as[i], ns[i] = k.consumer, k.aggregate, counts[k]
	}
	out := make(map[laneKey]laneRange, len(keys))
	// Prepared, binary arrays: an upsert from unnest plans the same for
	// every size (see insertEvents).
	b.Queue(l.reserveSQL, cs, as, ns, time.Now().UTC()).Query(func(rows pgx.Rows) error {
		var k laneKey
		var head, last int64
		_, err := pgx.ForEachRow(rows, []any{&k.consumer, &k.aggregate, &head, &last}, func() error {
			out[k] = laneRange{next: last - counts[k] + 1, head: head}
			return nil
		})
		if err != nil {
			return fmt.Errorf("error reserving lane sequence numbers: %w", err)
		}
		return nil
	})
	return out
}

// queuePeek queues on b the read without a lock of every consumer's lane
// of the given aggregates, for insertReserveLate, and fills out with the
// range each lane's next reservation would get (next is last_seq + 1; head
// is head_seq) when b's results are read; see peekedRange for a lane not
// created yet. It names aggregates, not lanes, so that it can go out in one
// round trip with the consumers' read, before the routing that names the
// lanes.
func (l *lanes) queuePeek(b *pgx.Batch, aggregates []string, out map[laneKey]laneRange) {
	b.Queue(l.lastSQL, aggregates).Query(func(rows pgx.Rows) error {
		var k laneKey
		var head, last int64
		_, err := pgx.ForEachRow(rows, []any{&k.consumer, &k.aggregate, &head, &last}, func() error {
			out[k] = laneRange{next: last + 1, head: head}
			return nil
		})
		if err != nil {
			return fmt.Errorf("error reading lanes' last sequence numbers: %w", err)
		}
		return nil
	})
}

// peekedRange is lane k's range as queuePeek read it; a lane not created
// yet as the reservation would create it (next and head 1).
func peekedRange(peeked map[laneKey]laneRange, k laneKey) laneRange {
	if lr, ok := peeked[k]; ok {
		return lr
	}
	return laneRange{next: 1, head: 1}
}

// cmpLane orders lanes as every lane transaction locks them.
func cmpLane(consumerA, aggA, consumerB, aggB string) int {
	if c := strings.Compare(consumerA, consumerB); c != 0 {
		return c
	}
	return strings.Compare(aggA, aggB)
}

// advance moves the lane's head past seq and makes the next dispatch of the
// lane available, in tx, and returns the promoted job's queue ("" for
// none); a lane whose head is not seq is left alone (a replay of a skipped
// dispatch, or a re-run after a crash between the lane update and River's
// bookkeeping). Two statements: the promotion needs a snapshot taken after
// the lane row lock was granted (riverjob.PromoteNext).
func (l *lanes) advance(ctx context.Context, tx pgx.Tx, consumer, aggregate string, seq int64) (string, error) {
	now := time.Now().UTC()
	var head int64
	err := tx.QueryRow(ctx, l.advanceSQL, customPlan, consumer, aggregate, seq, now).Scan(&head)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("error advancing lane %s/%s: %w", consumer, aggregate, err)
	}
	queues, err := riverjob.PromoteNext(ctx, tx, l.schema, []riverjob.LaneSeq{{Consumer: consumer, AggregateID: aggregate, Seq: head}}, now)
	if err != nil || len(queues) == 0 {
		return "", err
	}
	return queues[0], nil
}

// queueAdvanceMany queues on b advance's lane part for the jobs of a group
// commit, set-based: move each lane whose head is places[i].Seq to
// nexts[i] (past the events handled), locking the lanes in the order of
// places, which must be cmpLane's (the forwarder's reservation locks its
// lanes in that order too). The update is the lock: a lane whose head is
// elsewhere is not this completion's to move, and is left unlocked. The
// statements queued after it promote or claim the next dispatches of the
// lanes whose head is now at nexts[i] (riverjob.QueuePromoteAtHead).
func (l *lanes) queueAdvanceMany(b *pgx.Batch, places []riverjob.LaneSeq, nexts []int64, now time.Time) {
	n := len(places)
	consumers, aggs, seqs := make([]string, n), make([]string, n), make([]int64, n)
	for i, p := range places {
		consumers[i], aggs[i], seqs[i] = p.Consumer, p.AggregateID, p.Seq
	}
	b.Queue(l.advanceManySQL, consumers, aggs, seqs, now, nexts, laneTouchEvery)
}

// release moves the lane past a dispatch that was given up (OrderingSkip,
// an operator's cancel) in a transaction of its own on db and returns the
// queue of the dispatch it promoted.
func (l *lanes) release(ctx context.Context, db queue.DBTX, consumer, aggregate string, seq int64) (string, error) {
	var promoted string
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		var err error
		promoted, err = l.advance(ctx, tx, consumer, aggregate, seq)
		return err
	})
	return promoted, err
}

// lock reads and locks a lane; ok is false when there is none.
func (l *lanes) lock(ctx context.Context, tx pgx.Tx, consumer, aggregate string) (r laneRow, ok bool, err error) {
	var reason *string
	err = tx.QueryRow(ctx, l.lockSQL, consumer, aggregate).Scan(&r.headSeq, &r.lastSeq, &r.blockedJobID, &reason, &r.blockedSince, &r.blockedArgs)
	if errors.Is(err, pgx.ErrNoRows) {
		return r, false, nil
	}
	if err != nil {
		return r, false, fmt.Errorf("error locking lane %s/%s: %w", consumer, aggregate, err)
	}
	if reason != nil {
		r.blockedReason = *reason
	}
	return r, true, nil
}

// headJob finds the dispatch job at seq of a lane, in any state (ID 0 when
// there is none: deleted by hand or by River's retention).
func (l *lanes) headJob(ctx context.Context, db queue.DBTX, consumer, aggregate string, seq int64) (riverjob.LaneJob, error) {
	return riverjob.LaneJobAt(ctx, db, l.schema, riverjob.LaneSeq{Consumer: consumer, AggregateID: aggregate, Seq: seq})
}

// block records that the job at the lane's head holds it.
func (l *lanes) block(ctx context.Context, db queue.DBTX, consumer, aggregate string, seq, jobID int64, reason string, args []byte) (bool, error) {
	tag, err := db.Exec(ctx, l.blockSQL, consumer, aggregate, seq, jobID, reason, time.Now().UTC(), args)
	if err != nil {
		return false, fmt.Errorf("error recording the block of lane %s/%s: %w", consumer, aggregate, err)
	}
	return tag.RowsAffected() == 1, nil
}

// clearBlock forgets the block of a lane whose head is seq.
func (l *lanes) clearBlock(ctx context.Context, tx pgx.Tx, consumer, aggregate string, seq int64) error {
	if _, err := tx.Exec(ctx, l.clearBlockSQL, consumer, aggregate, seq); err != nil {
		return fmt.Errorf("error unblocking lane %s/%s: %w", consumer, aggregate, err)
	}
	return nil
}

// turn reports whether a lane job that was never marked as its lane's head
// may run now: it is its lane's head, or behind it. A job ahead of its head
// was made available from outside tributary (River's client or UI, SQL): it
// goes back to pending with its attempt given back, and runs when its turn
// comes (early is true; head is the lane's head then). It costs one
// primary-key read; the lane is locked only for a job that looks early, so
// that a head completing at that moment either sees it pending (and
// promotes it) or has already moved the head to it.
func (l *lanes) turn(ctx context.Context, db queue.DBTX, jobID int64, args dispatchArgs) (early bool, head int64, err error) {
	err = db.QueryRow(ctx, l.headSQL, args.Consumer, args.AggregateID).Scan(&head)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && args.Seq <= head) {
		return false, head, nil
	}
	if err != nil {
		return false, 0, fmt.Errorf("error reading the lane of dispatch %d: %w", jobID, err)
	}
	err = pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		r, ok, err := l.lock(ctx, tx, args.Consumer, args.AggregateID)
		if err != nil || !ok || args.Seq <= r.headSeq {
			return err
		}
		early, head = true, r.headSeq
		return riverjob.ReturnToPending(ctx, tx, l.schema, jobID, time.Now().UTC())
	})
	return early, head, err
}

// quiet reads one page of the lanes with work behind their head that were
// untouched since cutoff, after the last one read, each with its head job
// (for the repair sweep).
func (l *lanes) quiet(ctx context.Context, db queue.DBTX, cutoff time.Time, after laneSnapshot, limit int) ([]laneSnapshot, error) {
	rows, err := db.Query(ctx, l.quietSQL, customPlan, cutoff, after.updatedAt, after.consumer, after.aggregate, limit)
	if err != nil {
		return nil, err
	}
	page, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (laneSnapshot, error) {
		var s laneSnapshot
		var ordering string
		err := r.Scan(&s.consumer, &s.aggregate, &s.headSeq, &s.updatedAt, &s.blockedJobID, &ordering)
		s.ordering = Ordering(ordering)
		return s, err
	})
	if err != nil || len(page) == 0 {
		return page, err
	}
	places := make([]riverjob.LaneSeq, len(page))
	for i, s := range page {
		places[i] = riverjob.LaneSeq{Consumer: s.consumer, AggregateID: s.aggregate, Seq: s.headSeq}
	}
	heads, err := riverjob.LaneJobsAt(ctx, db, l.schema, places)
	if err != nil {
		return nil, err
	}
	var bare []int // the lanes without a head job: is a lane event there?
	for i, h := range heads {
		s := &page[i]
		s.jobID, s.jobState, s.cancelRequested, s.limited = h.ID, string(h.State), h.CancelRequested, h.Limited
		s.jobArgs, s.lastError = h.Args, h.LastError
		s.attempt, s.attemptedBy, s.attemptedAt = h.Attempt, h.AttemptedBy, h.AttemptedAt
		if h.ID == 0 {
			bare = append(bare, i)
		}
	}
	at := make([]riverjob.LaneSeq, len(bare))
	for j, i := range bare {
		at[j] = places[i]
	}
	waiting, err := l.eventsAt(ctx, db, at)
	if err != nil {
		return nil, err
	}
	for j, i := range bare {
		w := waiting[j]
		page[i].laneEvent, page[i].eventClaimedBy, page[i].eventClaimedAt = w.found, w.claimedBy, w.claimedAt
	}
	return page, nil
}

// blockedBy finds the lane job id blocks, if any.
func (l *lanes) blockedBy(ctx context.Context, tx pgx.Tx, jobID int64) (consumer, aggregate string, found bool, err error) {
	err = tx.QueryRow(ctx, l.blockedByJobSQL, jobID).Scan(&consumer, &aggregate)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", "", false, nil
	}
	if err != nil {
		return "", "", false, fmt.Errorf("error looking for the lane job %d blocks: %w", jobID, err)
	}
	return consumer, aggregate, true, nil
}

// stillBlocks reports whether a lane's recorded block still holds it: its
// job is given up (cancelled, discarded) or gone (state ""). A recorded job
// that runs again (retried outside tributary) does not; the repair sweep
// forgets its record.
func stillBlocks(state rivertype.JobState) bool {
	return state == "" || state == rivertype.JobStateCancelled || state == rivertype.JobStateDiscarded
}

// listBlocked lists up to limit blocked lanes of consumer (all consumers
// for ""), longest blocked first. The lanes are read a page at a time and
// their jobs looked up, so lanes whose job runs again are passed over
// without shortening the list.
func (l *lanes) listBlocked(ctx context.Context, db queue.DBTX, consumer string, limit int) ([]BlockedLane, error) {
	out := []BlockedLane{}
	var since *time.Time
	var afterConsumer, afterAgg string
	for len(out) < limit {
		rows, err := db.Query(ctx, l.blockedSQL, consumer, limit, since, afterConsumer, afterAgg)
		if err != nil {
			return nil, fmt.Errorf("error listing blocked lanes: %w", err)
		}
		page, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (BlockedLane, error) {
			var b BlockedLane
			var reason *string
			var last int64
			err := r.Scan(&b.Consumer, &b.AggregateID, &b.JobID, &reason, &b.Since, &b.Seq, &last)
			if reason != nil {
				b.Reason = *reason
			}
			b.Waiting = last - b.Seq
			return b, err
		})
		if err != nil {
			return nil, fmt.Errorf("error listing blocked lanes: %w", err)
		}
		states, err := riverjob.JobStates(ctx, db, l.schema, page, func(b BlockedLane) int64 { return b.JobID })
		if err != nil {
			return nil, fmt.Errorf("error listing blocked lanes: %w", err)
		}
		for i, b := range page {
			if !stillBlocks(states[i]) || len(out) == limit {
				continue
			}
			b.JobState = cmp.Or(string(states[i]), "gone")
			out = append(out, b)
		}
		if len(page) < limit {
			break
		}
		last := page[len(page)-1]
		since, afterConsumer, afterAgg = &last.Since, last.Consumer, last.AggregateID
	}
	return out, nil
}

// blockedCounts counts each consumer's blocked lanes.
func (l *lanes) blockedCounts(ctx context.Context, db queue.DBTX) (map[string]int64, error) {
	blocked, err := riverjob.KeyedJobStates(ctx, db, l.schema, l.blockedJobsSQL)
	if err != nil {
		return nil, fmt.Errorf("error counting blocked lanes: %w", err)
	}
	out := map[string]int64{}
	for _, b := range blocked {
		if stillBlocks(b.State) {
			out[b.Key]++
		}
	}
	return out, nil
}

// deleteConsumer deletes up to limit of consumer's lanes and returns how
// many.
func (l *lanes) deleteConsumer(ctx context.Context, db queue.DBTX, consumer string, limit int) (int64, error) {
	tag, err := db.Exec(ctx, l.deleteConsumerSQL, consumer, limit)
	if err != nil {
		return 0, fmt.Errorf("error deleting the lanes of consumer %q: %w", consumer, err)
	}
	return tag.RowsAffected(), nil
}

// wake tells River's producers that dispatch jobs became available in the
// queues (riverjob.Wake), after the commit. A failure is only logged: the
// jobs are available and River's poll finds them without the nudge.
func (l *lanes) wake(ctx context.Context, db queue.DBTX, logger *slog.Logger, queues ...string) {
	if err := riverjob.Wake(context.WithoutCancel(ctx), db, l.schema, queues); err != nil {
		logger.WarnContext(ctx, "error waking River for a promoted dispatch", "error", err)
	}
}

// availableQueue is the queue of a job an action made available, for
// waking River's producers; "" otherwise.
func availableQueue(job *rivertype.JobRow) string {
	if job == nil || job.State != rivertype.JobStateAvailable {
		return ""
	}
	return job.Queue
}

// laneTouchEvery is how stale the group commit's advance lets a lane's
// updated_at get: it writes it only when it is older than that (the bus's
// reservation writes it only where the lane was idle, laneReserveSQL). An
// update that changes no indexed column (updated_at and the waiting column
// of migration 0017) stays on its page (HOT), and these two run once per
// ordered event each. The repair sweep's quiet time counts it
// (laneQuietCutoff), and the idle lanes' clean-up keeps a lane up to this
// much longer.
const laneTouchEvery = 5 * time.Second

// laneQuietCutoff is the updated_at before which a lane has been untouched
// for at least quietFor at now, whatever laneTouchEvery left unwritten.
func laneQuietCutoff(now time.Time, quietFor time.Duration) time.Time {
	return now.Add(-quietFor - laneTouchEvery)
}

// laneReserveSQL adds $3[i] sequence numbers to each lane (creating it at
// head 1) and returns the lane's head and new last sequence number. A
// lane's updated_at is when its head last changed: a reservation sets it
// only where the lane was idle (its first reserved event becomes the head).
// Events added behind a head leave it, so the repair sweep's quiet time
// (lanes untouched for laneRepairQuietFor) counts from the head's last move
// even while the aggregate's events keep coming.
const laneReserveSQL = `
INSERT INTO /*schema*/tributary_event_lane AS l (consumer, aggregate_id, head_seq, last_seq, updated_at)
SELECT u.c, u.a, 1, u.n, $4 FROM unnest($1::text[], $2::text[], $3::bigint[]) WITH ORDINALITY AS u(c, a, n, ord)
ORDER BY u.ord
ON CONFLICT (consumer, aggregate_id) DO UPDATE
SET last_seq = l.last_seq + excluded.last_seq,
    updated_at = CASE WHEN l.head_seq > l.last_seq THEN excluded.updated_at ELSE l.updated_at END
RETURNING consumer, aggregate_id, head_seq, last_seq`

// laneLastSQL reads the heads and last sequence numbers of every
// consumer's lanes of the aggregates $1: one probe of the primary key per
// (consumer, aggregate), the consumers' names from their table (the read
// goes out before the bus knows which consumers the events go to). The
// probe is a LATERAL subquery that Postgres cannot turn into a join (OFFSET
// 0): the read runs with its generic plan (Bus.queueStart), and as a plain
// join that plan, made while the lanes' table was empty, probed the primary
// key with the aggregate alone, its second column, which reads the whole
// index for each aggregate (TestLanesReadProbesThePrimaryKey).
const laneLastSQL = `
SELECT c.name, u.a, l.head_seq, l.last_seq
FROM /*schema*/tributary_event_consumer c
CROSS JOIN unnest($1::text[]) AS u(a)
CROSS JOIN LATERAL (
    SELECT l.head_seq, l.last_seq FROM /*schema*/tributary_event_lane l
    WHERE l.consumer = c.name AND l.aggregate_id = u.a
    OFFSET 0
) l`

// laneAdvanceSQL moves the head on and forgets a block: whatever held the
// lane was handled or given up.
const laneAdvanceSQL = `
UPDATE /*schema*/tributary_event_lane
SET head_seq = head_seq + 1, updated_at = $4,
    blocked_job_id = NULL, blocked_reason = NULL, blocked_since = NULL, blocked_args = NULL
WHERE consumer = $1 AND aggregate_id = $2 AND head_seq = $3
RETURNING head_seq`

// laneAdvanceManySQL is laneAdvanceSQL for many lanes, each moved from
// head $3[i] to $5[i]; updated_at moves only when it is $6 older than $4
// (laneTouchEvery). The rows are updated, and so locked, in the order of
// the arrays: the ordered subquery drives a nested loop over the primary
// key (the group commit runs it with hash and merge joins off,
// genericPlanSQL). The update is the lock: a SELECT ... FOR UPDATE first
// would cost one more statement and one more WAL record (the row lock) per
// lane of every group commit, and order by the database's collation rather
// than the forwarder's byte order.
const laneAdvanceManySQL = `
UPDATE /*schema*/tributary_event_lane l
SET head_seq = u.n, updated_at = CASE WHEN l.updated_at > $4::timestamptz - $6::interval THEN l.updated_at ELSE $4 END,
    blocked_job_id = NULL, blocked_reason = NULL, blocked_since = NULL, blocked_args = NULL
FROM (SELECT x.c, x.a, x.s, x.n FROM unnest($1::text[], $2::text[], $3::bigint[], $5::bigint[]) WITH ORDINALITY AS x(c, a, s, n, ord)
      ORDER BY x.ord) u
WHERE l.consumer = u.c AND l.aggregate_id = u.a AND l.head_seq = u.s`

const laneBlockSQL = `
UPDATE /*schema*/tributary_event_lane
SET blocked_job_id = $4, blocked_reason = $5, blocked_since = $6, blocked_args = $7
WHERE consumer = $1 AND aggregate_id = $2 AND head_seq = $3`

const laneClearBlockSQL = `
UPDATE /*schema*/tributary_event_lane
SET blocked_job_id = NULL, blocked_reason = NULL, blocked_since = NULL, blocked_args = NULL
WHERE consumer = $1 AND aggregate_id = $2 AND head_seq = $3`

const laneHeadSQL = `
SELECT head_seq FROM /*schema*/tributary_event_lane WHERE consumer = $1 AND aggregate_id = $2`

const laneLockSQL = `
SELECT head_seq, last_seq, blocked_job_id, blocked_reason, blocked_since, blocked_args
FROM /*schema*/tributary_event_lane WHERE consumer = $1 AND aggregate_id = $2
FOR UPDATE`

// laneQuietSQL reads one page of the lanes with work behind their head that
// were untouched since $1, in (updated_at, consumer, aggregate_id) order
// after the last one read ($2..$4), through
// tributary_event_lane_waiting_idx. The page is picked first,
// MATERIALIZED, and the heads of its lanes only are looked up afterwards
// (riverjob.LaneJobsAt): looked up in the same query, a plan that sorts
// after the join looked up the heads of every waiting lane for each page
// (docs/ARCHITECTURE.md, "Repair sweep").
const laneQuietSQL = `
WITH quiet AS MATERIALIZED (
    SELECT consumer, aggregate_id, head_seq, updated_at, blocked_job_id FROM /*schema*/tributary_event_lane
    WHERE waiting AND updated_at < $1
      AND (updated_at, consumer, aggregate_id) > ($2, $3, $4)
    ORDER BY updated_at, consumer, aggregate_id
    LIMIT $5
)
SELECT l.consumer, l.aggregate_id, l.head_seq, l.updated_at, l.blocked_job_id, coalesce(c.ordering, 'block')
FROM quiet l
LEFT JOIN /*schema*/tributary_event_consumer c ON c.name = l.consumer
ORDER BY l.updated_at, l.consumer, l.aggregate_id`

const laneBlockedByJobSQL = `
SELECT consumer, aggregate_id FROM /*schema*/tributary_event_lane
WHERE blocked_job_id = $1 LIMIT 1`

// laneBlockedSQL reads a page of blocked lanes ($1: of one consumer, or ”
// for all), longest blocked first, after ($3, $4, $5) unless $3 is NULL.
const laneBlockedSQL = `
SELECT consumer, aggregate_id, blocked_job_id, blocked_reason, blocked_since, head_seq, last_seq
FROM /*schema*/tributary_event_lane
WHERE blocked_job_id IS NOT NULL AND ($1 = '' OR consumer = $1)
  AND ($3::timestamptz IS NULL OR (blocked_since, consumer, aggregate_id) > ($3, $4, $5))
ORDER BY blocked_since, consumer, aggregate_id
LIMIT $2`

// laneBlockedJobsSQL reads every recorded block, through
// tributary_event_lane_blocked_idx.
const laneBlockedJobsSQL = `
SELECT consumer, blocked_job_id FROM /*schema*/tributary_event_lane WHERE blocked_job_id IS NOT NULL`

const laneDeleteConsumerSQL = `
DELETE FROM /*schema*/tributary_event_lane WHERE (consumer, aggregate_id) IN (
    SELECT consumer, aggregate_id FROM /*schema*/tributary_event_lane WHERE consumer = $1
    LIMIT $2 FOR UPDATE)`
