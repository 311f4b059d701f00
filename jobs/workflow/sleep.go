package workflow

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/tributary-run/tributary/internal/riverjob"
)

// WaitRecheck is how long a task waiting for a signal without a timeout
// snoozes before it looks again (a signal wakes it at once; the re-check is
// the safety net for a wake-up that was lost with a process).
const WaitRecheck = time.Hour

// timerHorizon bounds the snoozes a Coordinator keeps an in-process timer
// for; longer ones are woken by River's scheduler, a few seconds late at most.
const timerHorizon = 15 * time.Minute

// WaitError is what Sleep and AwaitSignal return while the task has to
// wait: return it from Work (as is, or wrapped). It wraps River's
// JobSnooze, so River puts the job aside until Until (or until a signal
// wakes it) and the task holds no worker slot meanwhile. River v0.51.2
// gives a snoozed job its attempt back (its executor writes attempt - 1),
// so waiting does not use up MaxAttempts. The next attempt runs Work from
// the top: recorded steps return their outputs without running again, and
// the wait returns once it is over.
type WaitError struct {
	Task  string
	Step  string    // the Sleep's name, or "signal:" and the signal's name
	Until time.Time // when the task looks again

	snooze error
}

func (e *WaitError) Error() string {
	return fmt.Sprintf("task %q waits at step %q until %s", e.Task, e.Step, e.Until.Format(time.RFC3339Nano))
}

// Unwrap returns River's snooze.
func (e *WaitError) Unwrap() error { return e.snooze }

func waitUntil(tc *taskContext, step string, until time.Time) error {
	d := max(time.Until(until), 0)
	return &WaitError{Task: tc.ref.Task, Step: step, Until: until, snooze: river.JobSnooze(d)}
}

// Sleep makes the task wait d, durably: the first call records the wake-up
// time under name (a step name, unique in the run) and returns a
// *WaitError, which Work returns; River snoozes the job, so no worker slot
// is held, and a process that dies or restarts meanwhile changes nothing.
// When the job runs again after the wake-up, Sleep returns nil and the task
// goes on past it (steps before it return their recorded outputs).
//
//	if err := workflow.Sleep(ctx, "cool-off", 24*time.Hour); err != nil {
//		return err
//	}
func Sleep(ctx context.Context, name string, d time.Duration) error {
	tc, err := taskFrom(ctx)
	if err != nil {
		return fmt.Errorf("workflow.Sleep: %w", err)
	}
	if err := userStepName(name); err != nil {
		return err
	}
	tc.mu.Lock()
	rec, err := tc.useStep(ctx, name)
	tc.mu.Unlock()
	if err != nil {
		return err
	}
	now := time.Now().UTC()
	if rec == nil {
		wake := now.Add(d)
		done := d <= 0
		var inserted bool
		err := tc.c.pool.QueryRow(ctx, tc.c.sql.insertStep, customPlan, tc.ref.JobID, name, tc.ref.WorkflowID, tc.ref.Task,
			"sleep", nil, wake, done, now).Scan(&inserted)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			// Recorded by a concurrent attempt of this job: its wake-up counts.
			if rec, err = tc.readStepRecord(ctx, name); err != nil {
				return err
			}
		case err != nil:
			return ownRecord(fmt.Errorf("error recording sleep %q of task %q: %w", name, tc.ref.Task, err))
		default:
			rec = &stepRecord{kind: "sleep", wakeAt: &wake, done: done}
		}
		tc.mu.Lock()
		tc.remember(name, rec)
		tc.mu.Unlock()
	}
	if rec.kind != "sleep" {
		return fmt.Errorf("task %q: step %q is a %s, not a sleep: %w", tc.ref.Task, name, rec.kind, ErrDuplicateStep)
	}
	if rec.done {
		return nil
	}
	if now.Before(*rec.wakeAt) {
		return waitUntil(tc, name, *rec.wakeAt)
	}
	if _, err := tc.c.pool.Exec(ctx, tc.c.sql.finishStep, customPlan, tc.ref.JobID, name, nil, false, now); err != nil {
		return ownRecord(fmt.Errorf("error recording the end of sleep %q of task %q: %w", name, tc.ref.Task, err))
	}
	tc.mu.Lock()
	rec.done = true
	tc.mu.Unlock()
	return nil
}

// readStepRecord reads one step of the running job.
func (tc *taskContext) readStepRecord(ctx context.Context, name string) (*stepRecord, error) {
	var r stepRecord
	if err := tc.c.pool.QueryRow(ctx, tc.c.sql.selectStepRecord, customPlan, tc.ref.JobID, name).
		Scan(&r.kind, &r.output, &r.wakeAt, &r.done, &r.timedOut); err != nil {
		return nil, ownRecord(fmt.Errorf("error reading step %q of task %q: %w", name, tc.ref.Task, err))
	}
	return &r, nil
}

const selectStepRecordSQL = `
SELECT kind, output, wake_at, done, timed_out FROM /*schema*/tributary_workflow_step WHERE job_id = $1 AND name = $2`

// timers wakes snoozed task jobs of this process at the end of their
// snooze, instead of at River's next scheduler run (every 5 seconds by
// default): armed when River reports a task's job snoozed (after River
// wrote the snooze), for snoozes that end within timerHorizon. A timer lost
// with its process costs only the scheduler's lateness.
type timers struct {
	c *Coordinator

	mu  sync.Mutex
	set map[int64]*time.Timer
	ctx context.Context // the coordinator's run; nil when stopped
}

func (ts *timers) start(ctx context.Context) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	ts.ctx = ctx
	ts.set = map[int64]*time.Timer{}
}

func (ts *timers) stop() {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	for _, t := range ts.set {
		t.Stop()
	}
	ts.set, ts.ctx = nil, nil
}

// arm wakes job id at `at`.
func (ts *timers) arm(id int64, at time.Time) {
	d := time.Until(at)
	if d > timerHorizon {
		return
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.ctx == nil {
		return
	}
	if old := ts.set[id]; old != nil {
		old.Stop()
	}
	ctx := ts.ctx
	ts.set[id] = time.AfterFunc(max(d, 0), func() {
		ts.mu.Lock()
		if ts.set != nil {
			delete(ts.set, id)
		}
		ts.mu.Unlock()
		ts.c.wakeDue(ctx, id, at)
	})
}

func (c *Coordinator) wakeDue(ctx context.Context, id int64, at time.Time) {
	if ctx.Err() != nil {
		return
	}
	// River's snooze time is its client's clock; allow a little skew.
	_, queues, err := riverjob.WakeDue(ctx, c.pool, c.cfg.Schema, []int64{id}, at.Add(50*time.Millisecond))
	if err == nil {
		err = riverjob.Wake(ctx, c.pool, c.cfg.Schema, queues)
	}
	if err != nil && ctx.Err() == nil {
		c.logger.WarnContext(ctx, "error waking a snoozed task; River's scheduler will", "job_id", id, "error", err)
	}
}
