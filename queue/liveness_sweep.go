package queue

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// rescueBatchSize bounds the jobs one rescue statement updates.
const rescueBatchSize = 1000

const (
	// One sweeper at a time per schema. River's leader election is not
	// reachable through River's public API (its periodic jobs would cost a
	// job row and a worker slot per sweep), so a transaction-level advisory
	// lock elects the sweeper of the moment: a process that does not get it
	// skips this round, and a sweeper that dies releases it with its
	// connection.
	sweepLockSQL = `SELECT pg_try_advisory_xact_lock(hashtextextended($1, 0))`

	// Declares the stale processes dead. The row lock it takes makes a late
	// heartbeat of such a process wait for the sweep's commit and then find
	// its row swept.
	sweepClaimSQL = `
UPDATE /*schema*/tributary_process SET swept_at = now()
WHERE swept_at IS NULL AND heartbeat_at < now() - $1::float8 * interval '1 second'
RETURNING id, hostname, pid, heartbeat_at`

	// Seconds until the oldest live heartbeat goes stale (NULL: no process).
	sweepNextSQL = `
SELECT extract(epoch FROM min(heartbeat_at) - now())::float8 + $1::float8
FROM /*schema*/tributary_process WHERE swept_at IS NULL`

	sweepForgetSQL = `
DELETE FROM /*schema*/tributary_process WHERE swept_at < now() - $1::float8 * interval '1 second'`

	// rescueJobsSQL makes the running jobs whose latest attempt belongs to
	// one of the processes in $1 available again, the way River's rescuer
	// does: the attempt River counted when it fetched the job stays counted,
	// an error naming the process is appended, river:rescue_count goes up, a
	// job out of attempts is discarded and one whose cancellation was
	// requested is cancelled. Unlike River's rescuer it does not wait for a
	// retry backoff: the job did not fail, its process died, and the
	// liveness timeout already was the wait.
	//
	// Cost: the candidates are found through river_job's
	// river_job_prioritized_fetching_index (state, queue, ...), which leads
	// with state, so the statement reads the running jobs only (bounded by
	// the workers of all processes), never the whole table. No ORDER BY: an
	// ordered LIMIT could make the planner walk the primary key instead.
	// The outer WHERE checks state again, since a job may have finished
	// while the sweep waited for its row lock.
	rescueJobsSQL = `
WITH stuck AS MATERIALIZED (
    SELECT j.id, j.attempted_by[cardinality(j.attempted_by)] AS process_id
    FROM /*schema*/river_job j
    WHERE j.state = 'running'
      AND j.attempted_by[cardinality(j.attempted_by)] = ANY($1::text[])
    LIMIT $2
    FOR UPDATE
), done AS (
    SELECT s.id, s.process_id, p.hostname, p.pid, p.heartbeat_at
    FROM stuck s LEFT JOIN /*schema*/tributary_process p ON p.id = s.process_id
)
UPDATE /*schema*/river_job j
SET state = CASE
        WHEN j.metadata ? 'cancel_attempted_at' THEN 'cancelled'::/*schema*/river_job_state
        WHEN j.attempt >= j.max_attempts THEN 'discarded'::/*schema*/river_job_state
        ELSE 'available'::/*schema*/river_job_state
    END,
    finalized_at = CASE WHEN j.metadata ? 'cancel_attempted_at' OR j.attempt >= j.max_attempts THEN now() END,
    scheduled_at = CASE WHEN j.metadata ? 'cancel_attempted_at' OR j.attempt >= j.max_attempts THEN j.scheduled_at ELSE now() END,
    errors = array_append(j.errors, jsonb_build_object(
        'at', now(),
        'attempt', greatest(j.attempt, 0),
        'error', format('%s: process %s (host %s, pid %s, last heartbeat %s)',
            $3::text, d.process_id, coalesce(d.hostname, '?'), coalesce(d.pid::text, '?'), coalesce(d.heartbeat_at::text, '?')),
        'trace', '')),
    metadata = j.metadata || jsonb_build_object('river:rescue_count', coalesce(
        CASE WHEN jsonb_typeof(j.metadata -> 'river:rescue_count') = 'number' THEN (j.metadata ->> 'river:rescue_count')::int END,
        0) + 1)
FROM done d
WHERE j.id = d.id AND j.state = 'running'
RETURNING j.queue, j.state::text`

	staleProcessesSQL = `
SELECT id FROM /*schema*/tributary_process WHERE heartbeat_at < now() - $1::float8 * interval '1 second'`
)

// sweeper makes the running jobs of dead processes available again.
type sweeper struct {
	pool   *pgxpool.Pool
	schema string
	logger *slog.Logger

	lockKey, claimSQL, nextSQL, forgetSQL, rescueSQL, wakeChannel string
}

func newSweeper(pool *pgxpool.Pool, schema string, logger *slog.Logger) *sweeper {
	q := func(sql string) string { return Qualify(schema, sql) }
	return &sweeper{
		pool: pool, schema: schema, logger: logger,
		lockKey:  "tributary.liveness." + schema,
		claimSQL: q(sweepClaimSQL), nextSQL: q(sweepNextSQL), forgetSQL: q(sweepForgetSQL), rescueSQL: q(rescueJobsSQL),
		wakeChannel: RiverInsertChannel(schema),
	}
}

// rescueCounts counts the jobs a rescue changed, by the state they went to.
type rescueCounts struct {
	available, discarded, cancelled int
	queues                          []string // of the jobs made available
}

func (c rescueCounts) total() int { return c.available + c.discarded + c.cancelled }

// rescue makes the running jobs attempted last by processIDs available
// again (or discarded, or cancelled), in batches, in tx.
func (s *sweeper) rescue(ctx context.Context, tx pgx.Tx, processIDs []string, reason string) (rescueCounts, error) {
	var c rescueCounts
	seen := map[string]bool{}
	for {
		rows, err := tx.Query(ctx, s.rescueSQL, processIDs, rescueBatchSize, reason)
		if err != nil {
			return c, fmt.Errorf("error making the jobs of dead processes available: %w", err)
		}
		n := 0
		for rows.Next() {
			var queue, state string
			if err := rows.Scan(&queue, &state); err != nil {
				rows.Close()
				return c, err
			}
			n++
			switch state {
			case "available":
				c.available++
				if !seen[queue] {
					seen[queue] = true
					c.queues = append(c.queues, queue)
				}
			case "discarded":
				c.discarded++
			case "cancelled":
				c.cancelled++
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return c, fmt.Errorf("error making the jobs of dead processes available: %w", err)
		}
		if n == 0 {
			return c, nil
		}
	}
}

// deadProcess is a process the sweep declared dead.
type deadProcess struct {
	id, hostname string
	pid          int
	heartbeatAt  time.Time
}

// sweepResult is what one sweep did.
type sweepResult struct {
	dead   []deadProcess
	counts rescueCounts
	next   time.Duration // until the oldest live heartbeat goes stale; 0: no live process
}

// sweep declares the processes whose heartbeat is older than timeout dead
// and makes their running jobs available again, if no other process is
// sweeping the schema right now. It returns how long until the oldest live
// heartbeat goes stale (0 when there is no live process).
func (s *sweeper) sweep(ctx context.Context, timeout time.Duration) (time.Duration, error) {
	var res sweepResult
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		res, err = s.sweepTx(ctx, tx, timeout)
		return err
	})
	if err != nil {
		return 0, err
	}
	for _, p := range res.dead {
		s.logger.WarnContext(ctx, "process declared dead: no heartbeat within the liveness timeout",
			"dead_process_id", p.id, "hostname", p.hostname, "pid", p.pid, "last_heartbeat", p.heartbeatAt, "timeout", timeout)
	}
	if res.counts.total() > 0 {
		s.logger.WarnContext(ctx, "running jobs of dead processes made available again",
			"processes", len(res.dead), "available", res.counts.available, "discarded", res.counts.discarded, "cancelled", res.counts.cancelled)
		s.wake(ctx, res.counts.queues)
	}
	return res.next, nil
}

// sweepTx is sweep's work inside tx.
func (s *sweeper) sweepTx(ctx context.Context, tx pgx.Tx, timeout time.Duration) (sweepResult, error) {
	var res sweepResult
	var leader bool
	if err := tx.QueryRow(ctx, sweepLockSQL, s.lockKey).Scan(&leader); err != nil {
		return res, fmt.Errorf("error taking the sweep lock: %w", err)
	}
	if !leader {
		return res, nil
	}
	rows, err := tx.Query(ctx, s.claimSQL, timeout.Seconds())
	if err != nil {
		return res, fmt.Errorf("error looking for dead processes: %w", err)
	}
	res.dead, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (deadProcess, error) {
		var p deadProcess
		err := row.Scan(&p.id, &p.hostname, &p.pid, &p.heartbeatAt)
		return p, err
	})
	if err != nil {
		return res, fmt.Errorf("error looking for dead processes: %w", err)
	}
	if len(res.dead) > 0 {
		ids := make([]string, len(res.dead))
		for i, p := range res.dead {
			ids[i] = p.id
		}
		if res.counts, err = s.rescue(ctx, tx, ids, rescueReasonDead); err != nil {
			return res, err
		}
	}
	if _, err := tx.Exec(ctx, s.forgetSQL, DeadProcessRetention.Seconds()); err != nil {
		return res, fmt.Errorf("error deleting old rows of dead processes: %w", err)
	}
	var next *float64
	if err := tx.QueryRow(ctx, s.nextSQL, timeout.Seconds()).Scan(&next); err != nil {
		return res, fmt.Errorf("error reading the oldest heartbeat: %w", err)
	}
	if next != nil && *next > 0 {
		res.next = time.Duration(*next * float64(time.Second))
	}
	return res, nil
}

// wake tells River's producers that jobs are available in queues, so they
// fetch at once instead of at their next poll.
func (s *sweeper) wake(ctx context.Context, queues []string) {
	for _, q := range queues {
		payload := fmt.Sprintf(`{"queue": %q}`, q)
		if _, err := s.pool.Exec(ctx, "SELECT pg_notify($1, $2)", s.wakeChannel, payload); err != nil {
			s.logger.WarnContext(ctx, "error waking River for rescued jobs; its poll finds them", "queue", q, "error", err)
			return
		}
	}
}

// RiverInsertChannel is the notification channel River's producers listen
// on for new available jobs in schema; a payload {"queue": "name"} makes
// the producers of that queue fetch now.
func RiverInsertChannel(schema string) string { return schema + ".river_insert" }

// StaleProcesses returns the ids of the processes whose last heartbeat is
// older than timeout: the dead ones, whether or not the sweep has handled
// them yet (it keeps their rows for DeadProcessRetention). An id with no
// row at all is not among them: it may be a process that never had a row
// (a plain River client), whose liveness nobody can judge.
func StaleProcesses(ctx context.Context, db DBTX, schema string, timeout time.Duration) ([]string, error) {
	rows, err := db.Query(ctx, Qualify(schema, staleProcessesSQL), timeout.Seconds())
	if err != nil {
		return nil, fmt.Errorf("error listing stale processes: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("error listing stale processes: %w", err)
	}
	return ids, nil
}
