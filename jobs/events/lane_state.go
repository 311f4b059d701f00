package events

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

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
// skips it. The statements that change one lane live here, for the
// dispatcher, the repair sweep and the operator actions alike (the
// set-based ones of the group commit are in lane_completer.go).

// laneTurnKey marks, in a dispatch job's metadata, that the job has been
// its lane's head: the bus sets it on a job inserted as the head, every
// promotion on the job it makes available. A lane's head only moves
// forward, so a marked job is the head or behind it (a replay) and may
// run; only an unmarked lane job that starts (made available outside
// tributary) costs the dispatcher a look at its lane.
const laneTurnKey = "tributary_lane_turn"

// laneTurnMetadata is the metadata of a dispatch job inserted as its
// lane's head.
var laneTurnMetadata = []byte(`{"` + laneTurnKey + `": true}`)

// hadLaneTurn reports whether a dispatch job's metadata carries the mark.
func hadLaneTurn(metadata []byte) bool {
	var m struct {
		Turn bool `json:"tributary_lane_turn"`
	}
	return json.Unmarshal(metadata, &m) == nil && m.Turn
}

// laneStatements are the lane statements qualified for one schema.
type laneStatements struct {
	advance, promote, block, clearBlock string
	head, lock, requeue, headJobSQL     string
	wakeChannel                         string
}

func newLaneStatements(schema string) *laneStatements {
	return &laneStatements{
		advance:     queue.Qualify(schema, laneAdvanceSQL),
		promote:     queue.Qualify(schema, lanePromoteSQL),
		block:       queue.Qualify(schema, laneBlockSQL),
		clearBlock:  queue.Qualify(schema, laneClearBlockSQL),
		head:        queue.Qualify(schema, laneHeadSQL),
		lock:        queue.Qualify(schema, laneLockSQL),
		requeue:     queue.Qualify(schema, laneRequeueSQL),
		headJobSQL:  queue.Qualify(schema, laneHeadJobSQL),
		wakeChannel: queue.RiverInsertChannel(schema),
	}
}

// advanceLane moves the lane's head past seq and makes the next dispatch of
// the lane available; a lane whose head is not seq is left alone. Two
// statements: the second needs a snapshot taken after the lane row lock was
// granted, so that it sees a dispatch a forwarder inserted while this
// transaction waited for the lock.
func (s *laneStatements) advanceLane(ctx context.Context, tx pgx.Tx, consumer, aggregate string, seq int64) (promotedQueue string, err error) {
	var head int64
	err = tx.QueryRow(ctx, s.advance, customPlan, consumer, aggregate, seq, time.Now().UTC()).Scan(&head)
	if errors.Is(err, pgx.ErrNoRows) {
		// Not the head: a replay of a skipped dispatch, or a re-run after a
		// crash between the lane update and River's bookkeeping.
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("error advancing lane %s/%s: %w", consumer, aggregate, err)
	}
	err = tx.QueryRow(ctx, s.promote, customPlan, consumer, aggregate, head, time.Now().UTC()).Scan(&promotedQueue)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil // the lane is idle now
	}
	if err != nil {
		return "", fmt.Errorf("error promoting the next dispatch of lane %s/%s: %w", consumer, aggregate, err)
	}
	return promotedQueue, nil
}

// laneRow is a lane as read under its row lock.
type laneRow struct {
	headSeq, lastSeq int64
	blockedJobID     *int64
	blockedReason    string
	blockedSince     *time.Time
	blockedArgs      []byte
}

// lockLane reads and locks a lane; ok is false when there is none.
func (s *laneStatements) lockLane(ctx context.Context, tx pgx.Tx, consumer, aggregate string) (l laneRow, ok bool, err error) {
	var reason *string
	err = tx.QueryRow(ctx, s.lock, consumer, aggregate).Scan(&l.headSeq, &l.lastSeq, &l.blockedJobID, &reason, &l.blockedSince, &l.blockedArgs)
	if errors.Is(err, pgx.ErrNoRows) {
		return l, false, nil
	}
	if err != nil {
		return l, false, fmt.Errorf("error locking lane %s/%s: %w", consumer, aggregate, err)
	}
	if reason != nil {
		l.blockedReason = *reason
	}
	return l, true, nil
}

// headJob finds the dispatch job at seq of a lane, in any state: id 0 when
// there is none (deleted by hand or by River's retention).
func (s *laneStatements) headJob(ctx context.Context, db queue.DBTX, consumer, aggregate string, seq int64) (id int64, state string, err error) {
	err = db.QueryRow(ctx, s.headJobSQL, customPlan, consumer, aggregate, seq).Scan(&id, &state)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, "", nil
	}
	if err != nil {
		return 0, "", fmt.Errorf("error reading the head of lane %s/%s: %w", consumer, aggregate, err)
	}
	return id, state, nil
}

// blockLane records that the job at the lane's head holds it.
func (s *laneStatements) blockLane(ctx context.Context, db queue.DBTX, consumer, aggregate string, seq, jobID int64, reason string, args []byte) (bool, error) {
	tag, err := db.Exec(ctx, s.block, consumer, aggregate, seq, jobID, reason, time.Now().UTC(), args)
	if err != nil {
		return false, fmt.Errorf("error recording the block of lane %s/%s: %w", consumer, aggregate, err)
	}
	return tag.RowsAffected() == 1, nil
}

// wakeRiver tells River's producers that jobs became available in the
// queues, as River's own insert does. It runs after the commit, as a
// statement of its own: a NOTIFY inside a writing transaction holds
// Postgres' global notify lock through that transaction's WAL flush,
// serialising the commits of every worker; a read-only NOTIFY commits
// without a flush. A failure is only logged: the jobs are available and
// River's poll finds them without the nudge.
func (s *laneStatements) wakeRiver(ctx context.Context, db queue.DBTX, logger *slog.Logger, queueNames ...string) {
	seen := map[string]bool{}
	for _, q := range queueNames {
		if q == "" || seen[q] {
			continue
		}
		seen[q] = true
		payload := fmt.Sprintf(`{"queue": %q}`, q)
		if _, err := db.Exec(context.WithoutCancel(ctx), "SELECT pg_notify($1, $2)", s.wakeChannel, payload); err != nil {
			logger.WarnContext(ctx, "error waking River for a promoted dispatch", "error", err)
		}
	}
}

// laneAdvanceSQL moves the head on and forgets a block: whatever held the
// lane was handled or given up.
const laneAdvanceSQL = `
UPDATE /*schema*/tributary_event_lane
SET head_seq = head_seq + 1, updated_at = $4,
    blocked_job_id = NULL, blocked_reason = NULL, blocked_since = NULL, blocked_args = NULL
WHERE consumer = $1 AND aggregate_id = $2 AND head_seq = $3
RETURNING head_seq`

// lanePromoteSQL makes the lane's next dispatch available, marked as its
// lane's head (laneTurnKey).
const lanePromoteSQL = `
UPDATE /*schema*/river_job
SET state = 'available', scheduled_at = $4, metadata = metadata || '{"tributary_lane_turn": true}'
WHERE state = 'pending' AND kind = 'tributary.event.dispatch'
  AND (args ->> 'consumer') = $1 AND (args ->> 'aggregate_id') = $2 AND ((args ->> 'seq')::bigint) = $3
RETURNING queue`

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

// laneRequeueSQL puts a lane job that started ahead of its lane's head
// back to waiting, giving back the attempt its start counted (as River's
// own snooze does).
const laneRequeueSQL = `
UPDATE /*schema*/river_job
SET state = 'pending', attempt = greatest(attempt - 1, 0), scheduled_at = $2
WHERE id = $1 AND state = 'running'`

// laneHeadJobSQL finds a lane's dispatch job at a sequence number in any
// state, through tributary_dispatch_lane_idx. The newest wins: a retry that
// re-inserted a blocked job River had deleted is the same event again.
const laneHeadJobSQL = `
SELECT id, state::text FROM /*schema*/river_job
WHERE kind = 'tributary.event.dispatch'
  AND (args ->> 'consumer') = $1 AND (args ->> 'aggregate_id') = $2 AND ((args ->> 'seq')::bigint) = $3
ORDER BY id DESC LIMIT 1`
