package workflow

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/tributary-run/tributary/internal/riverjob"
)

// middleware is the Coordinator's River worker middleware.
type middleware struct{ c *Coordinator }

// IsMiddleware implements rivertype.Middleware.
func (middleware) IsMiddleware() bool { return true }

// Work runs a job; for a workflow task it records the end of the job's
// last attempt (success, attempts used up, cancelled) in one transaction
// before River sees the result. A failure's or a cancel's job is finalized
// in that transaction; a success's job is completed by River's completer
// after it (record 0023), so a job can run again after its task was
// recorded (the process died before River's completer wrote it): such an
// attempt does not run the task's code again and ends as a success.
func (m middleware) Work(ctx context.Context, job *rivertype.JobRow, doInner func(ctx context.Context) error) error {
	meta, ok := taskMetaOf(job)
	if !ok {
		return doInner(ctx)
	}
	c := m.c
	if job.Attempt > 1 {
		done, err := c.recordedSuccess(ctx, meta.Workflow, meta.Task, job.ID)
		if err != nil && riverjob.ConnectionError(err) && ctx.Err() == nil {
			// Not the task's failure: it runs again without spending an
			// attempt.
			return river.JobSnooze(riverjob.RecordRetryDelay(job.Metadata))
		}
		if err != nil {
			return err
		}
		if done {
			return nil
		}
	}
	tc := &taskContext{c: c, ref: TaskRef{WorkflowID: meta.Workflow, Task: meta.Task, JobID: job.ID}}
	start := time.Now().UTC()
	// The task's outcome is recorded guarded by its job running at this
	// attempt, so nothing inside may complete the job first (the limits'
	// middleware would, to give a limited job's slot back early; the
	// completer completes a limited task's job itself).
	err := runRecovered(riverjob.WithOwnCompletion(withTask(ctx, tc)), doInner)
	if cause, lost := riverjob.RecordLostConnection(err); lost && ctx.Err() == nil {
		// One of tributary's records inside the task lost the database
		// connection, not the task's code: it runs again without spending
		// an attempt, from its recorded steps.
		delay := riverjob.RecordRetryDelay(job.Metadata)
		c.logger.WarnContext(ctx, "the database connection failed while a task recorded a step: it runs again, its attempt not counted",
			"workflow_id", meta.Workflow, "task", meta.Task, "job_id", job.ID, "attempt", job.Attempt, "retry_in", delay, "error", cause)
		return river.JobSnooze(delay)
	}

	end, terminal := classify(ctx, job, err)
	if !terminal {
		return err
	}
	o := outcome{WorkflowID: meta.Workflow, Task: meta.Task, JobID: job.ID, State: end.state, Attempt: job.Attempt,
		StartedAt: job.AttemptedAt, Errors: attemptErrors(job)}
	var expand []*taskDef
	if end.state == TaskCompleted {
		tc.mu.Lock()
		o.Output = tc.output
		expand = tc.expand
		tc.mu.Unlock()
	} else {
		ae := AttemptError{Attempt: job.Attempt, At: start, Error: end.err.Error()}
		var pe *PanicError
		if errors.As(err, &pe) {
			ae.Trace = pe.Stack
		}
		o.Errors = append(o.Errors, ae)
	}
	cerr := c.completer.submit(ctx, &request{jobCtx: ctx, job: job, outcome: o, jobState: end.jobState, expand: expand})
	switch {
	case cerr == nil:
		return err
	case err == nil && riverjob.ConnectionError(cerr):
		// The database connection failed, not the task: it runs again
		// without spending an attempt (snoozed), so a burst of
		// terminated sessions cannot fail a workflow whose tasks never
		// failed.
		delay := riverjob.RecordRetryDelay(job.Metadata)
		c.logger.WarnContext(ctx, "the database connection failed while recording a task's completion: it runs again, its attempt not counted",
			"workflow_id", meta.Workflow, "task", meta.Task, "job_id", job.ID, "attempt", job.Attempt, "retry_in", delay, "error", cerr)
		return river.JobSnooze(delay)
	case err == nil:
		// Not recorded: River retries the job (the task runs again).
		return fmt.Errorf("task %q of workflow %s succeeded but its completion could not be recorded: %w", meta.Task, meta.Workflow, cerr)
	default:
		// River finalizes the job as it would have; the repair sweep
		// records the task's failure from it.
		c.logger.WarnContext(ctx, "could not record a task's failure; the repair sweep will", "workflow_id", meta.Workflow, "task", meta.Task, "job_id", job.ID, "error", cerr)
		return err
	}
}

// runRecovered runs a task, turning a panic into a *PanicError with the
// stack of the panic (River's own recovery happens outside the middleware,
// where the task's frames are already gone).
func runRecovered(ctx context.Context, doInner func(ctx context.Context) error) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = &PanicError{Value: v, Stack: string(debug.Stack())}
		}
	}()
	return doInner(ctx)
}

// end is how a task's attempt ended for good.
type end struct {
	state    TaskState          // completed, failed, cancelled
	jobState rivertype.JobState // what the job becomes
	err      error              // the attempt's error (failed, cancelled)
}

// classify says whether an attempt's result ends the job, following what
// River's executor does with it (internal/jobexecutor reportError):
// success completes; a snooze and a stop's cancellation (context.Canceled
// while the client stops) do not end it; a remote cancellation and
// river.JobCancel cancel it; an error on the last attempt discards it;
// any other error is retried. River's ErrorHandler may also cancel a job;
// tributary's runtime sets none, and the repair sweep records such a job.
func classify(ctx context.Context, job *rivertype.JobRow, err error) (end, bool) {
	var snooze *rivertype.JobSnoozeError
	var cancel *rivertype.JobCancelError
	switch {
	case err == nil:
		return end{state: TaskCompleted, jobState: rivertype.JobStateCompleted}, true
	case errors.As(err, &snooze):
		return end{}, false
	case ctx.Err() != nil && errors.Is(context.Cause(ctx), rivertype.ErrJobCancelledRemotely):
		return end{state: TaskCancelled, jobState: rivertype.JobStateCancelled, err: context.Cause(ctx)}, true
	case errors.As(err, &cancel):
		return end{state: TaskFailed, jobState: rivertype.JobStateCancelled, err: err}, true
	case ctx.Err() != nil && errors.Is(err, context.Canceled):
		return end{}, false
	case job.Attempt >= job.MaxAttempts:
		return end{state: TaskFailed, jobState: rivertype.JobStateDiscarded, err: err}, true
	default:
		return end{}, false
	}
}

// attemptErrors converts the job's earlier attempts' errors.
func attemptErrors(job *rivertype.JobRow) []AttemptError {
	out := make([]AttemptError, 0, len(job.Errors)+1)
	for _, e := range job.Errors {
		out = append(out, AttemptError{Attempt: e.Attempt, At: e.At, Error: e.Error, Trace: e.Trace})
	}
	return out
}

// taskRecordedSQL says whether a task's success with this job is recorded.
const taskRecordedSQL = `
SELECT EXISTS (SELECT 1 FROM /*schema*/tributary_workflow_task
               WHERE workflow_id = $1::uuid AND name = $2 AND job_id = $3 AND state = 'completed')`

// recordedSuccess says whether the task's success with job jobID is
// recorded: the first attempt never finds one, so only a job's later
// attempts ask.
func (c *Coordinator) recordedSuccess(ctx context.Context, workflowID, task string, jobID int64) (bool, error) {
	var done bool
	if err := c.pool.QueryRow(ctx, c.sql.taskRecorded, workflowID, task, jobID).Scan(&done); err != nil {
		return false, fmt.Errorf("error reading task %q of workflow %s: %w", task, workflowID, err)
	}
	return done, nil
}
