package riverjob

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river/rivertype"
)

// Process names a worker process whose running jobs are rescued, with what
// the rescue's error records about it. Hostname, PID and HeartbeatAt are
// zero when unknown (recorded as "?").
type Process struct {
	ID          string
	Hostname    string
	PID         int
	HeartbeatAt *time.Time
}

// Rescued is one job a rescue changed: its queue and the state it went to.
type Rescued struct {
	Queue string
	State rivertype.JobState
}

// RescueRunning makes up to limit running jobs whose latest attempt belongs
// to one of procs available again, in tx, the way River's rescuer does: the
// attempt River counted when it fetched the job stays counted, an error
// naming the process and reason is appended, river:rescue_count goes up, a
// job out of attempts is discarded and one whose cancellation was requested
// is cancelled. Unlike River's rescuer it does not wait for a retry
// backoff: the job did not fail, its process died. Call it until it returns
// no jobs.
func RescueRunning(ctx context.Context, tx pgx.Tx, schema string, procs []Process, limit int, reason string) ([]Rescued, error) {
	return rescueRunning(ctx, tx, schema, procs, nil, nil, limit, reason)
}

// RescueLost makes the jobs ids available again as RescueRunning does, those
// of them still running under proc's latest attempt that began more than
// olderThan ago (on the database clock): the jobs a live process found
// running under its name that it no longer runs (RunningUnder).
func RescueLost(ctx context.Context, tx pgx.Tx, schema string, proc Process, ids []int64, olderThan time.Duration, reason string) ([]Rescued, error) {
	secs := olderThan.Seconds()
	return rescueRunning(ctx, tx, schema, []Process{proc}, ids, &secs, len(ids), reason)
}

// RunningUnder returns the ids of the jobs whose latest attempt runs under
// processID, through the same index as the rescue.
func RunningUnder(ctx context.Context, db DBTX, schema, processID string) ([]int64, error) {
	rows, err := db.Query(ctx, q(schema, runningUnderSQL), processID)
	if err != nil {
		return nil, fmt.Errorf("error listing the running jobs of process %s: %w", processID, err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("error listing the running jobs of process %s: %w", processID, err)
	}
	return ids, nil
}

const runningUnderSQL = `
SELECT j.id FROM /*schema*/river_job j
WHERE j.state = 'running'
  AND j.attempted_by[cardinality(j.attempted_by)] = $1`

func rescueRunning(ctx context.Context, tx pgx.Tx, schema string, procs []Process, onlyIDs []int64, olderThanSecs *float64, limit int, reason string) ([]Rescued, error) {
	ids, hosts, pids := make([]string, len(procs)), make([]*string, len(procs)), make([]*int32, len(procs))
	beats := make([]*time.Time, len(procs))
	for i, p := range procs {
		ids[i], beats[i] = p.ID, p.HeartbeatAt
		if p.Hostname != "" {
			hosts[i] = &p.Hostname
		}
		if p.PID != 0 {
			pid := int32(p.PID)
			pids[i] = &pid
		}
	}
	rows, err := tx.Query(ctx, q(schema, rescueRunningSQL), ids, hosts, pids, beats, limit, reason, onlyIDs, olderThanSecs)
	if err != nil {
		return nil, fmt.Errorf("error making the running jobs of %d processes available: %w", len(procs), err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Rescued, error) {
		var res Rescued
		var state string
		err := r.Scan(&res.Queue, &state)
		res.State = rivertype.JobState(state)
		return res, err
	})
	if err != nil {
		return nil, fmt.Errorf("error making the running jobs of %d processes available: %w", len(procs), err)
	}
	return out, nil
}

// rescueRunningSQL: the candidates are found through River's
// river_job_prioritized_fetching_index (state, queue, ...), which leads with
// state, so the statement reads the running jobs only (bounded by the
// workers of all processes), never the whole table. No ORDER BY: an ordered
// LIMIT could make the planner walk the primary key instead. The outer
// WHERE checks the state again, since a job may have finished while the
// statement waited for its row lock.
const rescueRunningSQL = `
WITH stuck AS MATERIALIZED (
    SELECT j.id, j.attempted_by[cardinality(j.attempted_by)] AS process_id
    FROM /*schema*/river_job j
    WHERE j.state = 'running'
      AND j.attempted_by[cardinality(j.attempted_by)] = ANY($1::text[])
      AND ($7::bigint[] IS NULL OR j.id = ANY($7::bigint[]))
      AND ($8::float8 IS NULL OR j.attempted_at < now() - make_interval(secs => $8::float8))
    LIMIT $5
    FOR UPDATE
), done AS (
    SELECT s.id, s.process_id, p.hostname, p.pid, p.heartbeat_at
    FROM stuck s
    LEFT JOIN unnest($1::text[], $2::text[], $3::int[], $4::timestamptz[]) AS p(id, hostname, pid, heartbeat_at) ON p.id = s.process_id
)
UPDATE /*schema*/river_job j
SET state = CASE
        WHEN j.metadata ? '` + CancelAttemptedKey + `' THEN 'cancelled'::/*schema*/river_job_state
        WHEN j.attempt >= j.max_attempts THEN 'discarded'::/*schema*/river_job_state
        ELSE 'available'::/*schema*/river_job_state
    END,
    finalized_at = CASE WHEN j.metadata ? '` + CancelAttemptedKey + `' OR j.attempt >= j.max_attempts THEN now() END,
    scheduled_at = CASE WHEN j.metadata ? '` + CancelAttemptedKey + `' OR j.attempt >= j.max_attempts THEN j.scheduled_at ELSE now() END,
    errors = array_append(j.errors, jsonb_build_object(
        'at', now(),
        'attempt', greatest(j.attempt, 0),
        'error', format('%s: process %s (host %s, pid %s, last heartbeat %s)',
            $6::text, d.process_id, coalesce(d.hostname, '?'), coalesce(d.pid::text, '?'), coalesce(d.heartbeat_at::text, '?')),
        'trace', '')),
    metadata = j.metadata || jsonb_build_object('river:rescue_count', coalesce(
        CASE WHEN jsonb_typeof(j.metadata -> 'river:rescue_count') = 'number' THEN (j.metadata ->> 'river:rescue_count')::int END,
        0) + 1)
FROM done d
WHERE j.id = d.id AND j.state = 'running'
RETURNING j.queue, j.state::text`
