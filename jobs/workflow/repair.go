package workflow

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river/rivertype"

	"github.com/tributary-run/tributary/internal/riverjob"
)

// repairBatch bounds the signalled waits one repair pass looks at.
const repairBatch = 1000

// The repair sweep's page: a pass reads at most repairWorkflows running
// workflows and repairTasks of their task rows, continuing where the last
// pass stopped and wrapping around at the end, so its cost does not grow
// with the number of running workflows or tasks (a large backlog is covered
// over several passes; one workflow of MaxTasks tasks over four).
const (
	repairWorkflows = 1000
	repairTasks     = 5000
)

// repairCursor is where the next repair pass starts: at the first running
// workflow from workflowID on, after its task task ("": from its first
// task). The zero cursor starts from the beginning.
type repairCursor struct {
	workflowID string
	task       string
}

// Repair runs one pass of the safety net and returns how many tasks it
// changed: active tasks whose job finished without the middleware
// recording it (River's JobCancel or JobDelete on a task's job, an
// ErrorHandler that cancelled it, a worker without the middleware) get the
// job's outcome (a job completed that way leaves no output; a deleted job
// counts as cancelled); an active task whose job is still pending (and
// not waiting for its limit's admission) is released; a pending task with nothing left to wait for is decided; a
// snoozed task waiting for a signal that came is woken (its process died
// before River's snooze event reached its coordinator). Only tasks
// unchanged for 10 seconds are looked at, those of a page of running
// workflows (repairWorkflows, repairTasks) continuing where the previous
// pass stopped. Each change is logged as a warning: by construction there
// are none.
func (c *Coordinator) Repair(ctx context.Context) (int, error) {
	now := time.Now().UTC()
	quiet := now.Add(-repairQuietFor)
	page, err := c.repairPage(ctx, quiet)
	if err != nil {
		return 0, err
	}
	bySettled := map[string][]riverjob.Settled{}
	for _, s := range page.Settled {
		bySettled[s.WorkflowID] = append(bySettled[s.WorkflowID], s)
	}
	undecided := map[string][]string{}
	for _, k := range page.Undecided {
		undecided[k.WorkflowID] = append(undecided[k.WorkflowID], k.Task)
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

// runningWorkflow is a running workflow of the repair sweep's page.
type runningWorkflow struct {
	id    string
	tasks int
}

// repairPage reads the tasks of the next page of running workflows and
// moves the cursor past them: running workflows from the cursor's on, as
// many as repairWorkflows and whose task counts add up to at most
// repairTasks (at least one), then at most repairTasks of their tasks. A
// page cut short by repairTasks (a workflow of more tasks) ends after its
// last task; the next pass continues there. Both statements run with
// bitmap and sequential scans off (repairPlanSQL).
func (c *Coordinator) repairPage(ctx context.Context, quiet time.Time) (riverjob.TaskPage, error) {
	c.repairMu.Lock()
	defer c.repairMu.Unlock()
	tx, err := c.pool.Begin(ctx)
	if err != nil {
		return riverjob.TaskPage{}, fmt.Errorf("error reading the repair sweep's page: %w", err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, repairPlanSQL); err != nil {
		return riverjob.TaskPage{}, fmt.Errorf("error reading the repair sweep's page: %w", err)
	}
	cur := c.repairCursor
	wfs, err := c.runningFrom(ctx, tx, cur.workflowID, c.repairWorkflows+1)
	if err == nil && len(wfs) == 0 && cur != (repairCursor{}) {
		// Past the last running workflow: wrap around.
		cur = repairCursor{}
		wfs, err = c.runningFrom(ctx, tx, "", c.repairWorkflows+1)
	}
	if err != nil {
		return riverjob.TaskPage{}, err
	}
	var ids []string
	tasks := 0
	for _, w := range wfs[:min(len(wfs), c.repairWorkflows)] {
		if len(ids) > 0 && tasks+w.tasks > c.repairTasks {
			break
		}
		ids = append(ids, w.id)
		tasks += w.tasks
	}
	after := ""
	if len(ids) > 0 && ids[0] == cur.workflowID {
		after = cur.task
	}
	page, err := riverjob.ScanWorkflowTasks(ctx, tx, c.cfg.Schema, quiet, ids, after, c.repairTasks)
	if err != nil {
		return riverjob.TaskPage{}, err
	}
	switch {
	case page.Read >= c.repairTasks:
		c.repairCursor = repairCursor{workflowID: page.Last.WorkflowID, task: page.Last.Task}
	case len(ids) < len(wfs):
		c.repairCursor = repairCursor{workflowID: wfs[len(ids)].id}
	default:
		c.repairCursor = repairCursor{} // the last running workflow: the next pass starts again
	}
	return page, nil
}

// runningFrom reads up to limit running workflows in id order from id
// from on ("": from the first) with their task counts.
func (c *Coordinator) runningFrom(ctx context.Context, tx pgx.Tx, from string, limit int) ([]runningWorkflow, error) {
	rows, err := tx.Query(ctx, c.sql.runningFrom, customPlan, cmp.Or(from, zeroUUID), limit)
	if err != nil {
		return nil, fmt.Errorf("error reading running workflows: %w", err)
	}
	wfs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (runningWorkflow, error) {
		var w runningWorkflow
		return w, row.Scan(&w.id, &w.tasks)
	})
	if err != nil {
		return nil, fmt.Errorf("error reading running workflows: %w", err)
	}
	return wfs, nil
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

// zeroUUID is below every workflow id.
const zeroUUID = "00000000-0000-0000-0000-000000000000"

// repairPlanSQL leaves the repair sweep's page the ordered index scans
// that stop after the page: the running workflows' partial index and the
// tasks' primary key (docs/ARCHITECTURE.md, workflows, "Repair sweep").
// Without statistics the planner read every running workflow in a bitmap
// scan to sort them (2,000 of a 20,000-workflow table; unbounded as they
// grow), and with them it read the 100,000-task table whole to find 5,000
// tasks of 1,000 workflows: both grow with the tables, not the page.
const repairPlanSQL = `SELECT set_config('enable_bitmapscan', 'off', true), set_config('enable_seqscan', 'off', true)`

// runningFromSQL pages through the running workflows in id order: an
// ordered scan of the partial index of running workflows from $1, which
// stops after $2 rows. The order names the table's column, not the
// output's text.
const runningFromSQL = `
SELECT w.id::text, w.task_count FROM /*schema*/tributary_workflow w
WHERE w.status = 'running' AND w.id >= $1::uuid
ORDER BY w.id
LIMIT $2`
