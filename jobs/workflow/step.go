package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Limits of what a task records while it runs. They bound the rows a task
// writes in tributary_workflow_step (read back in one query at the first
// step of every attempt) and the signals a workflow stores.
const (
	// MaxStepsPerTask is the most steps (Step, StepTx, Sleep, AwaitSignal,
	// child workflows) one run of a task may record.
	MaxStepsPerTask = 1000
	// StepOutputMaxBytes is the longest JSON a step may record as its
	// output: put larger results elsewhere and return a reference.
	StepOutputMaxBytes = 64 << 10
	// SignalPayloadMaxBytes is the longest JSON payload of a signal.
	SignalPayloadMaxBytes = 64 << 10
)

// signalStepPrefix starts the step name under which an AwaitSignal records
// what it got; user step names may not start with it.
const signalStepPrefix = "signal:"

// Errors of steps, for errors.Is.
var (
	// ErrDuplicateStep: a step name used twice in one run of a task.
	ErrDuplicateStep = errors.New("duplicate step name")
	// ErrLimit is the kind of *LimitError.
	ErrLimit = errors.New("workflow limit exceeded")
)

// LimitError is a step, signal or expansion beyond one of the documented
// limits (MaxStepsPerTask, StepOutputMaxBytes, SignalPayloadMaxBytes,
// MaxTasks). Nothing was recorded.
type LimitError struct {
	What  string // "step output", "steps per task", "signal payload", ...
	Name  string // the step, signal or task at fault
	Value int
	Max   int
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("%s of %q is %d, more than the limit of %d", e.What, e.Name, e.Value, e.Max)
}

// Unwrap returns ErrLimit.
func (e *LimitError) Unwrap() error { return ErrLimit }

// stepRecord is a recorded step of the running job.
type stepRecord struct {
	kind     string
	output   json.RawMessage
	wakeAt   *time.Time
	done     bool
	timedOut bool
}

// durable is the task context's view of its run's steps.
type durable struct {
	loaded bool
	steps  map[string]*stepRecord // by name, as recorded by this job
	used   map[string]bool        // names used by this attempt
}

// useStep claims name for this attempt and returns its record, if the run
// recorded one. The caller holds tc.mu.
func (tc *taskContext) useStep(ctx context.Context, name string) (*stepRecord, error) {
	if err := checkName("step name", name); err != nil {
		return nil, fmt.Errorf("task %q: %w", tc.ref.Task, err)
	}
	if tc.dur.used[name] {
		return nil, fmt.Errorf("task %q uses step name %q twice in one run: %w", tc.ref.Task, name, ErrDuplicateStep)
	}
	if !tc.dur.loaded {
		rows, err := tc.c.pool.Query(ctx, tc.c.sql.selectSteps, customPlan, tc.ref.JobID)
		if err != nil {
			return nil, ownRecord(fmt.Errorf("error reading the steps of task %q: %w", tc.ref.Task, err))
		}
		steps := map[string]*stepRecord{}
		var n string
		var r stepRecord
		_, err = pgx.ForEachRow(rows, []any{&n, &r.kind, &r.output, &r.wakeAt, &r.done, &r.timedOut}, func() error {
			rec := r
			steps[n] = &rec
			return nil
		})
		if err != nil {
			return nil, ownRecord(fmt.Errorf("error reading the steps of task %q: %w", tc.ref.Task, err))
		}
		tc.dur.steps, tc.dur.loaded = steps, true
		tc.dur.used = map[string]bool{}
	}
	tc.dur.used[name] = true
	rec := tc.dur.steps[name]
	if rec == nil && len(tc.dur.steps) >= MaxStepsPerTask {
		return nil, &LimitError{What: "steps per task", Name: tc.ref.Task, Value: len(tc.dur.steps) + 1, Max: MaxStepsPerTask}
	}
	return rec, nil
}

func (tc *taskContext) remember(name string, rec *stepRecord) { tc.dur.steps[name] = rec }

func encodeStepOutput(name string, v any) (json.RawMessage, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("error encoding the output of step %q: %w", name, err)
	}
	if len(b) > StepOutputMaxBytes {
		return nil, &LimitError{What: "step output", Name: name, Value: len(b), Max: StepOutputMaxBytes}
	}
	return b, nil
}

func decodeStepOutput[T any](name string, raw json.RawMessage) (T, error) {
	var v T
	if err := json.Unmarshal(raw, &v); err != nil {
		return v, fmt.Errorf("error decoding the recorded output of step %q into %T: %w", name, v, err)
	}
	return v, nil
}

func userStepName(name string) error {
	if strings.HasPrefix(name, signalStepPrefix) {
		return fmt.Errorf("step name %q starts with %q, which AwaitSignal's records use", name, signalStepPrefix)
	}
	if strings.HasPrefix(name, patchStepPrefix) {
		return fmt.Errorf("step name %q starts with %q, which Patched's records use", name, patchStepPrefix)
	}
	return nil
}

// Step runs fn once per run of the task: its first success is recorded
// (name, output as JSON, time) in its own transaction, and a later attempt
// of the same run (a retry after an error, a job rescued after its process
// died) gets the recorded output without running fn again. Steps are keyed
// by name, not position, so a deploy that reorders steps does not confuse
// runs in flight (a step a deploy adds goes behind Patched, which tells the
// runs that went past its place on older code); a name used twice in one
// run is ErrDuplicateStep.
// An error from fn is returned and nothing is recorded: the step runs again
// on the next attempt. When the record itself fails because the database
// connection did, the error returned says so to the task's middleware: a
// task that returns it runs again without spending an attempt.
//
// fn's side effects outside tributary's database can happen twice when the
// process dies between fn's return and the record's commit; use StepTx for
// database effects that must happen exactly once, and an idempotency key
// for other services. The output is at most StepOutputMaxBytes of JSON, and
// a run records at most MaxStepsPerTask steps.
//
// The record commits without waiting for its WAL flush (synchronous_commit
// off for that transaction; StepTx waits as usual). A worker that dies loses
// nothing by it: the commit is in Postgres. Only a crash of Postgres itself
// within the WAL writer's delay (200 ms by default) can lose the newest
// records, and then those steps run again, as a Step may anyway; any later
// synchronous commit (the task's completion, a StepTx) flushes every record
// before it. It takes a Step from a disk flush per call (milliseconds on
// a common disk) to a few round trips.
//
//	charge, err := workflow.Step(ctx, "charge", func(ctx context.Context) (Charge, error) {
//		return payments.Charge(ctx, order.ID, order.Amount) // keyed by order.ID
//	})
func Step[T any](ctx context.Context, name string, fn func(ctx context.Context) (T, error)) (T, error) {
	var zero T
	tc, rec, err := startStep(ctx, "workflow.Step", name)
	if err != nil {
		return zero, err
	}
	if rec != nil {
		return decodeStepOutput[T](name, rec.output)
	}
	v, err := fn(ctx)
	if err != nil {
		return v, err
	}
	out, err := encodeStepOutput(name, v)
	if err != nil {
		return zero, err
	}
	now := time.Now().UTC()
	var inserted bool
	err = pgx.BeginFunc(ctx, tc.c.pool, func(tx pgx.Tx) error {
		// Without waiting for the WAL flush: see Step's comment.
		if _, err := tx.Exec(ctx, "SET LOCAL synchronous_commit = off"); err != nil {
			return err
		}
		return tx.QueryRow(ctx, tc.c.sql.insertStep, customPlan, tc.ref.JobID, name, tc.ref.WorkflowID, tc.ref.Task,
			"step", string(out), nil, true, now).Scan(&inserted)
	})
	if errors.Is(err, pgx.ErrNoRows) {
		// Another attempt of this job (one that was presumed dead) recorded
		// the step first: its output is the step's.
		raw, err := tc.readStepOutput(ctx, tc.c.pool, name)
		if err != nil {
			return zero, err
		}
		return decodeStepOutput[T](name, raw)
	}
	if err != nil {
		return zero, ownRecord(fmt.Errorf("error recording step %q of task %q: %w", name, tc.ref.Task, err))
	}
	tc.rememberStep(name, out)
	return v, nil
}

// startStep is what Step and StepTx do first: find the task, check the
// name, and mark the step used in this run, returning its record when an
// earlier attempt of the run finished it.
func startStep(ctx context.Context, caller, name string) (*taskContext, *stepRecord, error) {
	tc, err := taskFrom(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", caller, err)
	}
	if err := userStepName(name); err != nil {
		return nil, nil, err
	}
	tc.mu.Lock()
	defer tc.mu.Unlock()
	rec, err := tc.useStep(ctx, name)
	return tc, rec, err
}

// rememberStep keeps a step this attempt recorded for the rest of the run.
func (tc *taskContext) rememberStep(name string, out json.RawMessage) {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	tc.remember(name, &stepRecord{kind: "step", output: out, done: true})
}

// readStepOutput reads the output of a step another attempt recorded.
func (tc *taskContext) readStepOutput(ctx context.Context, db interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}, name string) (json.RawMessage, error) {
	var raw json.RawMessage
	if err := db.QueryRow(ctx, tc.c.sql.selectStep, customPlan, tc.ref.JobID, name).Scan(&raw); err != nil {
		return nil, ownRecord(fmt.Errorf("error reading step %q of task %q: %w", name, tc.ref.Task, err))
	}
	return raw, nil
}

// StepTx is Step with fn run in the transaction that records the step:
// what fn writes with tx commits together with the record, or not at all,
// so a database side effect happens exactly once per run of the task. A
// second attempt that reaches the step while the first is still in it (a
// job rescued from a process that was only slow) waits for the first's
// transaction and then returns its output. An error from fn rolls back
// everything fn wrote.
//
//	n, err := workflow.StepTx(ctx, "reserve", func(ctx context.Context, tx pgx.Tx) (int, error) {
//		_, err := tx.Exec(ctx, `UPDATE stock SET reserved = reserved + 1 WHERE sku = $1`, sku)
//		return 1, err
//	})
func StepTx[T any](ctx context.Context, name string, fn func(ctx context.Context, tx pgx.Tx) (T, error)) (T, error) {
	var zero T
	tc, rec, err := startStep(ctx, "workflow.StepTx", name)
	if err != nil {
		return zero, err
	}
	if rec != nil {
		return decodeStepOutput[T](name, rec.output)
	}
	var v T
	var out json.RawMessage
	recorded, fnFailed := false, false
	err = pgx.BeginFunc(ctx, tc.c.pool, func(tx pgx.Tx) error {
		now := time.Now().UTC()
		// The record first: its key is the step's lock. A concurrent
		// attempt's insert waits here for this transaction.
		var inserted bool
		err := tx.QueryRow(ctx, tc.c.sql.insertStep, customPlan, tc.ref.JobID, name, tc.ref.WorkflowID, tc.ref.Task,
			"step", nil, nil, false, now).Scan(&inserted)
		if errors.Is(err, pgx.ErrNoRows) {
			out, err = tc.readStepOutput(ctx, tx, name)
			recorded = err == nil
			return err
		}
		if err != nil {
			return fmt.Errorf("error recording step %q of task %q: %w", name, tc.ref.Task, err)
		}
		if v, err = fn(ctx, tx); err != nil {
			fnFailed = true
			return err
		}
		if out, err = encodeStepOutput(name, v); err != nil {
			fnFailed = true
			return err
		}
		if _, err := tx.Exec(ctx, tc.c.sql.finishStep, customPlan, tc.ref.JobID, name, string(out), false, time.Now().UTC()); err != nil {
			return fmt.Errorf("error recording step %q of task %q: %w", name, tc.ref.Task, err)
		}
		return nil
	})
	if err != nil {
		if fnFailed {
			return zero, err // the task's own failure
		}
		return zero, ownRecord(err) // BEGIN, the record, COMMIT
	}
	tc.rememberStep(name, out)
	if recorded {
		return decodeStepOutput[T](name, out)
	}
	return v, nil
}

const selectStepsSQL = `
SELECT name, kind, output, wake_at, done, timed_out FROM /*schema*/tributary_workflow_step WHERE job_id = $1`

const selectStepSQL = `
SELECT output FROM /*schema*/tributary_workflow_step WHERE job_id = $1 AND name = $2`

// insertStepSQL records a step; with the name taken by this job it returns
// no row (ON CONFLICT waits for a transaction holding the key, then sees
// its outcome).
const insertStepSQL = `
INSERT INTO /*schema*/tributary_workflow_step (job_id, name, workflow_id, task, kind, output, wake_at, done, created_at, done_at)
VALUES ($1, $2, $3::uuid, $4, $5, $6::jsonb, $7, $8, $9, CASE WHEN $8 THEN $9::timestamptz END)
ON CONFLICT (job_id, name) DO NOTHING
RETURNING true`

const finishStepSQL = `
UPDATE /*schema*/tributary_workflow_step SET output = $3::jsonb, timed_out = $4, done = true, done_at = $5
WHERE job_id = $1 AND name = $2`
