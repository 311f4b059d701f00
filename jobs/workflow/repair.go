package workflow

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river/rivertype"

	"github.com/tributary-run/tributary/internal/riverjob"
)

// repairBatch bounds the active tasks one repair pass looks at: a pass
// continues where the last one stopped and wraps around at the end, so its
// cost does not grow with the number of active tasks (a large backlog is
// covered over several passes).
const repairBatch = 1000

// Repair runs one pass of the safety net and returns how many tasks it
// changed: active tasks whose job finished without the middleware
// recording it (River's JobCancel or JobDelete on a task's job, an
// ErrorHandler that cancelled it, a worker without the middleware) get the
// job's outcome (a job completed that way leaves no output; a deleted job
// counts as cancelled); an active task whose job is still pending is
// released; a pending task with nothing left to wait for is decided; a
// snoozed task waiting for a signal that came is woken (its process died
// before River's snooze event reached its coordinator). Only
// tasks unchanged for 10 seconds are looked at, and of the active ones at
// most 1,000 per pass, continuing where the previous pass stopped. Each change is logged as a
// warning: by construction there are none.
func (c *Coordinator) Repair(ctx context.Context) (int, error) {
	now := time.Now().UTC()
	quiet := now.Add(-repairQuietFor)
	c.repairMu.Lock()
	settled, next, err := riverjob.ScanActiveTasks(ctx, c.pool, c.cfg.Schema, quiet, c.repairCursor, repairBatch)
	if err == nil {
		c.repairCursor = next
	}
	c.repairMu.Unlock()
	if err != nil {
		return 0, err
	}
	rows, err := c.pool.Query(ctx, c.sql.undecidedTasks, customPlan, quiet, repairBatch)
	if err != nil {
		return 0, fmt.Errorf("error looking for undecided workflow tasks: %w", err)
	}
	undecided := map[string][]string{}
	for rows.Next() {
		var wf, name string
		if err := rows.Scan(&wf, &name); err != nil {
			rows.Close()
			return 0, err
		}
		undecided[wf] = append(undecided[wf], name)
	}
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("error looking for undecided workflow tasks: %w", err)
	}
	bySettled := map[string][]riverjob.Settled{}
	for _, s := range settled {
		bySettled[s.WorkflowID] = append(bySettled[s.WorkflowID], s)
	}
	wfs := map[string]bool{}
	for wf := range bySettled {
		wfs[wf] = true
	}
	for wf := range undecided {
		wfs[wf] = true
	}
	total, err := c.repairWaits(ctx, quiet)
	if err != nil {
		return 0, err
	}
	for wf := range wfs {
		n, err := c.repairWorkflow(ctx, wf, bySettled[wf], undecided[wf])
		if err != nil {
			return total, err
		}
		total += n
	}
	c.repaired.Add(int64(total))
	return total, nil
}

func (c *Coordinator) repairWorkflow(ctx context.Context, wf string, settled []riverjob.Settled, undecided []string) (int, error) {
	var queues []string
	changed := 0
	err := pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		now := time.Now().UTC()
		if _, err := lockWorkflows(ctx, tx, &c.sql, []string{wf}); err != nil {
			return err
		}
		a := newAdvance(tx, &c.sql, c.cfg.Schema, now)
		var outs []outcome
		var release []int64
		for _, s := range settled {
			o := outcome{WorkflowID: wf, Task: s.Task, JobID: s.JobID, Attempt: s.Attempt, StartedAt: s.AttemptedAt}
			for _, e := range s.Errors {
				o.Errors = append(o.Errors, AttemptError{Attempt: e.Attempt, At: e.At, Error: e.Error, Trace: e.Trace})
			}
			switch s.JobState {
			case rivertype.JobStatePending:
				release = append(release, s.JobID)
				continue
			case rivertype.JobStateCompleted:
				o.State = TaskCompleted
			case rivertype.JobStateDiscarded:
				o.State = TaskFailed
			case rivertype.JobStateCancelled:
				// Cancelled with River's JobCancel (it marks the job) is an
				// operator's cancel; otherwise the job gave up.
				o.State = TaskFailed
				if s.CancelAttempted {
					o.State = TaskCancelled
				}
			case "":
				o.State = TaskCancelled
				o.Errors = append(o.Errors, AttemptError{At: now, Error: fmt.Sprintf("job %d no longer exists (deleted outside the workflow)", s.JobID)})
			default:
				continue
			}
			outs = append(outs, o)
		}
		recorded, err := a.finish(ctx, outs)
		if err != nil {
			return err
		}
		for _, o := range recorded {
			c.logger.WarnContext(ctx, "recorded a workflow task's outcome its worker did not record", "workflow_id", wf, "task", o.Task, "job_id", o.JobID, "state", o.State)
		}
		changed = len(recorded)
		if len(release) > 0 {
			a.promote = append(a.promote, release...)
			c.logger.WarnContext(ctx, "released active workflow tasks whose jobs were still pending", "workflow_id", wf, "jobs", release)
			changed += len(release)
		}
		if len(undecided) > 0 {
			before := len(a.promote) + len(a.cancel)
			if err := a.decideUndecided(ctx, wf, undecided); err != nil {
				return err
			}
			if n := len(a.promote) + len(a.cancel) - before; n > 0 {
				c.logger.WarnContext(ctx, "decided workflow tasks left with nothing to wait for", "workflow_id", wf, "tasks", undecided)
				changed += n
			}
		}
		queues, err = a.flush(ctx)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("error repairing workflow %s: %w", wf, err)
	}
	if err := riverjob.Wake(ctx, c.pool, c.cfg.Schema, queues); err != nil {
		c.logger.WarnContext(ctx, "error waking River for released tasks", "error", err)
	}
	return changed, nil
}

const undecidedTasksSQL = `
SELECT workflow_id::text, name FROM /*schema*/tributary_workflow_task
WHERE state = 'pending' AND pending_deps = 0 AND updated_at < $1
ORDER BY updated_at
LIMIT $2`
