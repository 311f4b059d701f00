package riverjob

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river/rivertype"
)

// AttemptedJob is a job to insert as River itself would have left it after
// an attempt that ran elsewhere (one event of a batched dispatch): retryable
// (River's scheduler makes it available at ScheduledAt), discarded or
// cancelled with the attempt's error, or available and not attempted yet
// (Attempt 0, no Error).
type AttemptedJob struct {
	Kind        string
	Args        []byte
	State       rivertype.JobState
	Attempt     int
	MaxAttempts int
	ScheduledAt time.Time
	// Error is the attempt's error, recorded as River's executor records
	// one; nil for none.
	Error *rivertype.AttemptError
	// Limit is the limit that governs the job (a capped event consumer's),
	// "" for none: it goes into the job's metadata (LimitMetaName, key ""),
	// and an available job is inserted pending, to wait for admission.
	Limit string
}

// InsertAttempted inserts jobs into queue in tx, each in its state with its
// attempt: attempted_at set when it made one, finalized_at when it is
// cancelled or discarded, its error in errors. now is their created_at (and
// attempted_at and finalized_at). There is no River API for this: River's
// inserts make new jobs only.
func InsertAttempted(ctx context.Context, tx pgx.Tx, schema, queue string, jobs []AttemptedJob, now time.Time) error {
	n := len(jobs)
	states, kinds, args, errs, lims := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	attempts, maxAttempts := make([]int32, n), make([]int32, n)
	scheduled := make([]time.Time, n)
	for i, j := range jobs {
		if j.Error != nil {
			b, err := json.Marshal(j.Error)
			if err != nil {
				return fmt.Errorf("error encoding the attempt error of a %s job: %w", j.Kind, err)
			}
			errs[i] = string(b)
		}
		states[i], kinds[i], args[i], lims[i] = string(j.State), j.Kind, string(j.Args), j.Limit
		if j.Limit != "" && j.State == rivertype.JobStateAvailable {
			states[i] = string(rivertype.JobStatePending)
		}
		attempts[i], maxAttempts[i], scheduled[i] = int32(j.Attempt), int32(j.MaxAttempts), j.ScheduledAt
	}
	if _, err := tx.Exec(ctx, q(schema, insertAttemptedSQL), now, queue, states, attempts, maxAttempts, scheduled, args, errs, kinds, lims); err != nil {
		return fmt.Errorf("error inserting %d jobs: %w", n, err)
	}
	return nil
}

// CountUnfinishedDispatches counts each consumer's unfinished dispatch jobs
// (both kinds; waiting, running or retrying) through the partial index of
// unfinished dispatch jobs (tributary_dispatch_unfinished_idx): it reads
// the dispatch backlog, not the table's unfinished jobs or its dispatch jobs.
func CountUnfinishedDispatches(ctx context.Context, db DBTX, schema string) (map[string]int64, error) {
	rows, err := db.Query(ctx, q(schema, countUnfinishedDispatchesSQL))
	if err != nil {
		return nil, fmt.Errorf("error counting dispatch jobs: %w", err)
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var consumer string
		var n int64
		if err := rows.Scan(&consumer, &n); err != nil {
			return nil, fmt.Errorf("error counting dispatch jobs: %w", err)
		}
		out[consumer] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("error counting dispatch jobs: %w", err)
	}
	return out, nil
}

// DeleteWaitingDispatches deletes up to limit of consumer's unfinished
// dispatch jobs that are not running (River does not delete a running job)
// and returns how many.
func DeleteWaitingDispatches(ctx context.Context, db DBTX, schema, consumer string, limit int) (int64, error) {
	tag, err := db.Exec(ctx, q(schema, deleteWaitingDispatchesSQL), consumer, limit)
	if err != nil {
		return 0, fmt.Errorf("error deleting the dispatch jobs of consumer %q: %w", consumer, err)
	}
	return tag.RowsAffected(), nil
}

// CountRunningDispatches counts consumer's running dispatch jobs.
func CountRunningDispatches(ctx context.Context, db DBTX, schema, consumer string) (int64, error) {
	var n int64
	if err := db.QueryRow(ctx, q(schema, countRunningDispatchesSQL), consumer).Scan(&n); err != nil {
		return 0, fmt.Errorf("error counting the running dispatch jobs of consumer %q: %w", consumer, err)
	}
	return n, nil
}

const insertAttemptedSQL = `
INSERT INTO /*schema*/river_job (state, attempt, max_attempts, attempted_at, created_at, finalized_at, scheduled_at,
                                 priority, args, errors, kind, metadata, queue, tags)
SELECT u.state::/*schema*/river_job_state, u.attempt, u.max_attempts,
       CASE WHEN u.attempt > 0 THEN $1::timestamptz END,
       $1::timestamptz,
       CASE WHEN u.state IN ('cancelled', 'discarded') THEN $1::timestamptz END,
       u.scheduled_at, 1, u.args::jsonb,
       CASE WHEN u.err = '' THEN NULL ELSE ARRAY[u.err::jsonb] END,
       u.kind, CASE WHEN u.lim = '' THEN '{}'::jsonb ELSE jsonb_build_object('` + LimitMetaName + `', u.lim, '` + LimitMetaKey + `', '') END,
       $2, '{}'::varchar[]
FROM unnest($3::text[], $4::int[], $5::int[], $6::timestamptz[], $7::text[], $8::text[], $9::text[], $10::text[])
     AS u(state, attempt, max_attempts, scheduled_at, args, err, kind, lim)`

// dispatchKinds are both kinds of dispatch job, as a SQL list.
const dispatchKinds = `('` + DispatchKind + `', '` + DispatchBatchKind + `')`

// countUnfinishedDispatchesSQL says finalized_at IS NULL, not the five
// unfinished states, so that the planner matches the partial index's
// predicate; River's check constraint (finalized_or_finalized_at_null)
// makes the two the same rows.
const countUnfinishedDispatchesSQL = `
SELECT args ->> 'consumer', count(*) FROM /*schema*/river_job
WHERE finalized_at IS NULL AND kind IN ` + dispatchKinds + `
GROUP BY 1`

const deleteWaitingDispatchesSQL = `
DELETE FROM /*schema*/river_job WHERE id IN (
    SELECT id FROM /*schema*/river_job
    WHERE state IN ('available', 'pending', 'retryable', 'scheduled')
      AND kind IN ` + dispatchKinds + `
      AND args ->> 'consumer' = $1
    LIMIT $2 FOR UPDATE)`

const countRunningDispatchesSQL = `
SELECT count(*) FROM /*schema*/river_job
WHERE state = 'running' AND kind IN ` + dispatchKinds + `
  AND args ->> 'consumer' = $1`

// DispatchAttempt is when a dispatch job of one event was last fetched or
// claimed (its attempted_at), by the event's outbox id.
type DispatchAttempt struct {
	EventID     string
	AttemptedAt time.Time
}

// DispatchAttempts returns a DispatchAttempt for every dispatch job of
// schema that carries one event and was attempted: for a benchmark that
// splits an event's way from the outbox to its handler.
func DispatchAttempts(ctx context.Context, db DBTX, schema string) ([]DispatchAttempt, error) {
	rows, err := db.Query(ctx, q(schema, dispatchAttemptsSQL))
	if err != nil {
		return nil, fmt.Errorf("error reading the dispatch jobs' attempts: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (DispatchAttempt, error) {
		var a DispatchAttempt
		err := row.Scan(&a.EventID, &a.AttemptedAt)
		return a, err
	})
	if err != nil {
		return nil, fmt.Errorf("error reading the dispatch jobs' attempts: %w", err)
	}
	return out, nil
}

const dispatchAttemptsSQL = `
SELECT ((args ->> 'event')::jsonb ->> 'id'), attempted_at
FROM /*schema*/river_job
WHERE kind = '` + DispatchKind + `' AND args ? 'event' AND attempted_at IS NOT NULL`
