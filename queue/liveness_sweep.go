package queue

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/rivertype"

	"github.com/tributary-run/tributary/internal/riverjob"
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

	// The processes whose running jobs a rescue hands on, with what the
	// jobs' errors record about them.
	rescueProcessesSQL = `
SELECT id, hostname, pid, heartbeat_at FROM /*schema*/tributary_process WHERE id = ANY($1::text[])`

	staleProcessesSQL = `
SELECT id FROM /*schema*/tributary_process WHERE heartbeat_at < now() - $1::float8 * interval '1 second'`
)

// sweeper makes the running jobs of dead processes available again.
type sweeper struct {
	pool   *pgxpool.Pool
	schema string
	logger *slog.Logger

	lockKey, claimSQL, nextSQL, forgetSQL, processesSQL string
}

func newSweeper(pool *pgxpool.Pool, schema string, logger *slog.Logger) *sweeper {
	q := func(sql string) string { return Qualify(schema, sql) }
	return &sweeper{
		pool: pool, schema: schema, logger: logger,
		lockKey:  "tributary.liveness." + schema,
		claimSQL: q(sweepClaimSQL), nextSQL: q(sweepNextSQL), forgetSQL: q(sweepForgetSQL), processesSQL: q(rescueProcessesSQL),
	}
}

// rescueCounts counts the jobs a rescue changed, by the state they went to.
type rescueCounts struct {
	available, discarded, cancelled int
	queues                          []string // of the jobs made available
}

func (c rescueCounts) total() int { return c.available + c.discarded + c.cancelled }

// rescue makes the running jobs attempted last by processIDs available
// again (or discarded, or cancelled), in batches, in tx
// (riverjob.RescueRunning); the jobs' errors name each process's host, pid
// and last heartbeat as its row has them.
func (s *sweeper) rescue(ctx context.Context, tx pgx.Tx, processIDs []string, reason string) (rescueCounts, error) {
	var c rescueCounts
	rows, err := tx.Query(ctx, s.processesSQL, processIDs)
	if err != nil {
		return c, fmt.Errorf("error reading the processes whose jobs are made available: %w", err)
	}
	known, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (riverjob.Process, error) {
		var p riverjob.Process
		err := r.Scan(&p.ID, &p.Hostname, &p.PID, &p.HeartbeatAt)
		return p, err
	})
	if err != nil {
		return c, fmt.Errorf("error reading the processes whose jobs are made available: %w", err)
	}
	procs := make([]riverjob.Process, 0, len(processIDs))
	for _, id := range processIDs {
		p := riverjob.Process{ID: id}
		for _, k := range known {
			if k.ID == id {
				p = k
			}
		}
		procs = append(procs, p)
	}
	seen := map[string]bool{}
	for {
		jobs, err := riverjob.RescueRunning(ctx, tx, s.schema, procs, rescueBatchSize, reason)
		if err != nil {
			return c, err
		}
		if len(jobs) == 0 {
			return c, nil
		}
		for _, j := range jobs {
			switch j.State {
			case rivertype.JobStateAvailable:
				c.available++
				if !seen[j.Queue] {
					seen[j.Queue] = true
					c.queues = append(c.queues, j.Queue)
				}
			case rivertype.JobStateDiscarded:
				c.discarded++
			case rivertype.JobStateCancelled:
				c.cancelled++
			}
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
	if err := riverjob.Wake(ctx, s.pool, s.schema, queues); err != nil {
		s.logger.WarnContext(ctx, "error waking River for rescued jobs; its poll finds them", "queues", queues, "error", err)
	}
}

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
