package queue

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// LivenessTimeoutDefault is how old a process's heartbeat may get before the
// process is taken for dead and its running jobs are made available again.
// The outbox forwarder judges its stale claims by the same bound.
const LivenessTimeoutDefault = 30 * time.Second

// LivenessTimeoutMin is the smallest liveness timeout accepted. Below it the
// heartbeat (a sixth of the timeout) would compete with the work itself.
const LivenessTimeoutMin = time.Second

// DeadProcessRetention is how long the row of a process the sweep declared
// dead is kept, so that what the process left behind (outbox claims, a
// dashboard's history) can still be traced to it.
const DeadProcessRetention = time.Hour

// ErrLivenessLost is the error Runtime.Run returns when the process stopped
// because it could no longer prove that it is alive: its heartbeats did not
// reach the database for most of the liveness timeout, or another process's
// sweep already declared it dead. Its running jobs are, or are about to be,
// handed to live processes, so it stops working them rather than run them
// twice. Restart the process.
var ErrLivenessLost = errors.New("liveness lost")

// heartbeatsPerTimeout is how many heartbeats fit into one liveness timeout.
// A process stops itself one heartbeat interval before others may take it
// for dead, so the timeout must leave room for a few failed heartbeats.
const heartbeatsPerTimeout = 6

// The process row. heartbeat_at and swept_at come from the database clock,
// as does the sweep's "now": hosts' clocks may disagree, the database's is
// the one clock every process shares.
const (
	processLockSQL = `
SELECT hostname, pid, swept_at IS NOT NULL OR heartbeat_at < now() - $2::float8 * interval '1 second',
       extract(epoch FROM now() - heartbeat_at)::float8
FROM /*schema*/tributary_process WHERE id = $1
FOR UPDATE`

	processInsertSQL = `
INSERT INTO /*schema*/tributary_process (id, hostname, pid, queues, started_at, heartbeat_at, swept_at)
VALUES ($1, $2, $3, $4, now(), now(), NULL)
ON CONFLICT (id) DO NOTHING`

	processTakeOverSQL = `
UPDATE /*schema*/tributary_process
SET hostname = $2, pid = $3, queues = $4, started_at = now(), heartbeat_at = now(), swept_at = NULL
WHERE id = $1`

	// A swept row is not refreshed: the process was declared dead and its
	// jobs handed on, so zero rows tells it to stop.
	processBeatSQL = `
UPDATE /*schema*/tributary_process SET heartbeat_at = now() WHERE id = $1 AND swept_at IS NULL`

	processDeleteSQL = `DELETE FROM /*schema*/tributary_process WHERE id = $1`
)

// Reasons recorded in the errors of jobs made available again.
const (
	rescueReasonDead      = "process stopped heartbeating; job made available again by tributary's liveness sweep"
	rescueReasonRestarted = "process restarted under the same id while the job was running"
	rescueReasonStopped   = "process stopped while the job was still running"
)

// liveness is the Service that keeps this process's row in
// tributary_process and sweeps the rows of dead processes. It starts before
// River, so every job River fetches is attempted by a process with a row,
// and stops after River, so the row goes only once no job runs.
type liveness struct {
	pool     *pgxpool.Pool
	schema   string
	logger   *slog.Logger
	id       string
	hostname string
	pid      int
	queues   []string

	timeout    time.Duration
	interval   time.Duration // between heartbeats, and the longest wait between sweeps
	fenceAfter time.Duration // without a confirmed heartbeat, the process stops working

	lockSQL, insertSQL, takeOverSQL, beatSQL, deleteSQL string
	sweeper                                             *sweeper

	// onLost is called once, from any goroutine, when the process must
	// stop working.
	onLost func(cause error)
	// afterSweep, when set, runs after each sweep (the runtime's check
	// for its own lost jobs).
	afterSweep func(ctx context.Context)

	base   time.Time    // monotonic origin of lastOK
	lastOK atomic.Int64 // send time of the last confirmed heartbeat, as nanoseconds since base
	// beatFailures counts the heartbeats that did not reach the database:
	// the lost-jobs check (lost_jobs.go) starts its clock again after one.
	beatFailures atomic.Uint64
	lost         atomic.Bool // the process lost its liveness; it neither beats nor sweeps

	life Lifecycle
}

func newLiveness(pool *pgxpool.Pool, schema string, logger *slog.Logger, id string, queues []string, timeout time.Duration, onLost func(error)) *liveness {
	hostname, _ := os.Hostname()
	interval := timeout / heartbeatsPerTimeout
	q := func(sql string) string { return Qualify(schema, sql) }
	return &liveness{
		pool: pool, schema: schema, logger: logger.With("component", "liveness"),
		id: id, hostname: hostname, pid: os.Getpid(), queues: queues,
		timeout: timeout, interval: interval, fenceAfter: timeout - interval,
		lockSQL: q(processLockSQL), insertSQL: q(processInsertSQL), takeOverSQL: q(processTakeOverSQL),
		beatSQL: q(processBeatSQL), deleteSQL: q(processDeleteSQL),
		sweeper: newSweeper(pool, schema, logger.With("component", "liveness")),
		onLost:  onLost,
		base:    time.Now(),
	}
}

// defaultProcessID names a process for River's attempted_by and the
// process row: readable (host and pid) and unique (random suffix), within
// River's limit of 100 characters.
func defaultProcessID() string {
	host, _ := os.Hostname()
	if host == "" {
		host = "unknown-host"
	}
	if len(host) > 60 {
		host = host[:60]
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return fmt.Sprintf("tributary-%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b))
}

func (l *liveness) Name() string { return "liveness" }

// Start writes the process row, then heartbeats and sweeps in the
// background. If a row with this id is still beating (a process started
// with the same RuntimeConfig.ID), Start waits for it to go stale, up to one
// liveness timeout and a bit, and then fails.
func (l *liveness) Start(ctx context.Context) error {
	return l.life.Start(ctx, l.Name(), func(run *Run) error {
		if err := l.register(ctx); err != nil {
			return err
		}
		run.Go(func() { l.beatLoop(run.Stopping()) })
		run.Go(func() { l.sweepLoop(run.Stopping()) })
		l.logger.InfoContext(ctx, "liveness started", "process_id", l.id, "timeout", l.timeout, "heartbeat_interval", l.interval)
		return nil
	})
}

// Stop ends the heartbeat and the sweep, then, River having stopped,
// makes any job still running under this process's id available again
// (River could not record its end: the hard stop's grace ran out, or the
// database was briefly away) and deletes the row.
func (l *liveness) Stop(ctx context.Context) error {
	stopped, err := l.life.Stop(ctx)
	if !stopped || err != nil {
		// Past the deadline the row stays; once stale, another process's
		// sweep does what is left.
		return err
	}
	var rescued rescueCounts
	err = pgx.BeginFunc(ctx, l.pool, func(tx pgx.Tx) error {
		var err error
		if rescued, err = l.sweeper.rescue(ctx, tx, []string{l.id}, rescueReasonStopped); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, l.deleteSQL, l.id)
		return err
	})
	if err != nil {
		// The row stays; once stale, another process's sweep does this.
		return fmt.Errorf("error removing the liveness row of process %q: %w", l.id, err)
	}
	if rescued.total() > 0 {
		l.logger.WarnContext(ctx, "jobs still running at stop made available again", "process_id", l.id,
			"available", rescued.available, "discarded", rescued.discarded, "cancelled", rescued.cancelled)
		l.sweeper.wake(ctx, rescued.queues)
	}
	l.logger.InfoContext(ctx, "liveness stopped", "process_id", l.id)
	return nil
}

// register inserts this process's row, or takes over the row of a dead
// process that had the same id (its running jobs are made available again
// first: before River starts, no job can be this process's).
func (l *liveness) register(ctx context.Context) error {
	giveUp := time.Now().Add(l.timeout + 2*l.interval)
	for {
		sent := time.Now()
		holder, err := l.tryRegister(ctx)
		if err != nil {
			return fmt.Errorf("error registering process %q: %w", l.id, err)
		}
		if holder == nil {
			l.markBeat(sent)
			return nil
		}
		if time.Now().After(giveUp) {
			return fmt.Errorf("process id %q is in use by a live process (host %s, pid %d, last heartbeat %.1fs ago); give every process its own RuntimeConfig.ID",
				l.id, holder.hostname, holder.pid, holder.age.Seconds())
		}
		l.logger.InfoContext(ctx, "another process with this id is still heartbeating; waiting for it to stop or go stale",
			"process_id", l.id, "hostname", holder.hostname, "pid", holder.pid)
		t := time.NewTimer(l.interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// liveHolder describes the live process that holds a row with our id.
type liveHolder struct {
	hostname string
	pid      int
	age      time.Duration
}

// tryRegister claims the row for this process, or returns the live process
// that holds it.
func (l *liveness) tryRegister(ctx context.Context) (*liveHolder, error) {
	var holder *liveHolder
	err := pgx.BeginFunc(ctx, l.pool, func(tx pgx.Tx) error {
		var h liveHolder
		var dead bool
		var age float64
		err := tx.QueryRow(ctx, l.lockSQL, l.id, l.timeout.Seconds()).Scan(&h.hostname, &h.pid, &dead, &age)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			tag, err := tx.Exec(ctx, l.insertSQL, l.id, l.hostname, l.pid, l.queues)
			if err == nil && tag.RowsAffected() == 0 {
				// A process starting with the same id at the same moment
				// inserted it first: it is the live holder.
				holder = &liveHolder{hostname: "(starting)"}
			}
			return err
		case err != nil:
			return err
		case !dead:
			h.age = time.Duration(age * float64(time.Second))
			holder = &h
			return nil
		}
		rescued, err := l.sweeper.rescue(ctx, tx, []string{l.id}, rescueReasonRestarted)
		if err != nil {
			return err
		}
		if rescued.total() > 0 {
			l.logger.WarnContext(ctx, "jobs left running by the previous process with this id made available again", "process_id", l.id,
				"previous_hostname", h.hostname, "previous_pid", h.pid,
				"available", rescued.available, "discarded", rescued.discarded, "cancelled", rescued.cancelled)
		}
		_, err = tx.Exec(ctx, l.takeOverSQL, l.id, l.hostname, l.pid, l.queues)
		return err
	})
	if err != nil {
		return nil, err
	}
	return holder, nil
}

// running reports whether the heartbeat runs (between Start and Stop).
func (l *liveness) running() bool { return l.life.Running() }

func (l *liveness) markBeat(sent time.Time) { l.lastOK.Store(int64(sent.Sub(l.base))) }

// sinceBeat is how long ago the last confirmed heartbeat was sent. The
// database stamped it no earlier than that, so the database's view of the
// heartbeat's age is at most this.
func (l *liveness) sinceBeat() time.Duration {
	return time.Since(l.base.Add(time.Duration(l.lastOK.Load())))
}

// expired reports whether the process has gone without a confirmed
// heartbeat for so long that it must stop working: within one more
// heartbeat interval another process may take it for dead.
func (l *liveness) expired() bool { return l.sinceBeat() >= l.fenceAfter }

// beatLoop refreshes the row every interval. A heartbeat that finds the row
// swept, or no confirmed heartbeat for fenceAfter, ends the loop and calls
// onLost: the process must stop working before a sweep hands its jobs on.
func (l *liveness) beatLoop(ctx context.Context) {
	tick := time.NewTicker(l.interval)
	defer tick.Stop()
	fence := time.NewTimer(l.fenceAfter - l.sinceBeat())
	defer fence.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-fence.C:
			if l.expired() {
				l.lose(fmt.Errorf("%w: no heartbeat reached the database for %s (liveness timeout %s)", ErrLivenessLost, l.sinceBeat().Round(time.Millisecond), l.timeout))
				return
			}
			fence.Reset(l.fenceAfter - l.sinceBeat())
			continue
		case <-tick.C:
		}
		if l.lost.Load() {
			return
		}
		// The heartbeat may not outlast the fence: the fence must act on time
		// even when the database does not answer at all.
		sent := time.Now()
		beatCtx, cancel := context.WithTimeout(ctx, max(min(l.interval, l.fenceAfter-l.sinceBeat()), time.Millisecond))
		tag, err := l.pool.Exec(beatCtx, l.beatSQL, l.id)
		cancel()
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			l.beatFailures.Add(1)
			l.logger.WarnContext(ctx, "heartbeat failed", "process_id", l.id, "error", err,
				"stopping_in", max(l.fenceAfter-l.sinceBeat(), 0).Round(time.Millisecond))
		case tag.RowsAffected() == 0:
			l.lose(fmt.Errorf("%w: the liveness sweep of another process declared process %q dead (no heartbeat for %s)", ErrLivenessLost, l.id, l.timeout))
			return
		default:
			l.markBeat(sent)
			fence.Reset(l.fenceAfter - l.sinceBeat())
		}
	}
}

// lose records that the process lost its liveness and tells the runtime.
func (l *liveness) lose(cause error) {
	l.lost.Store(true)
	l.onLost(cause)
}

// sweepLoop sweeps at once, then whenever the oldest live heartbeat is due
// to go stale, and at least every interval.
func (l *liveness) sweepLoop(ctx context.Context) {
	for !l.lost.Load() {
		next, err := l.sweeper.sweep(ctx, l.timeout)
		if err != nil && ctx.Err() == nil {
			l.logger.WarnContext(ctx, "liveness sweep failed", "error", err)
		}
		if l.afterSweep != nil && ctx.Err() == nil {
			l.afterSweep(ctx)
		}
		wait := l.interval
		if next > 0 && next < wait {
			// A little past the moment, so the heartbeat is stale by then.
			wait = next + 10*time.Millisecond
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// sortedQueues returns the queue names of a runtime for its process row.
func sortedQueues(queues map[string]int) []string {
	return slices.Sorted(maps.Keys(queues))
}
