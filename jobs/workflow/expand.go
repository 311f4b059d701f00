package workflow

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
)

// ExpandTask is a task added to the running task's workflow by Expand.
type ExpandTask struct {
	// Name is unique in the workflow (among its tasks so far and the other
	// tasks of the expansion).
	Name string
	// Args are the task's job args, worked by their usual worker.
	Args river.JobArgs
	// Opts are its options, as for Workflow.Add. The running task is always
	// a dependency; Deps may add other tasks of the same expansion.
	Opts *TaskOpts
	// Dependents are tasks of the workflow, pending now, that must also
	// wait for this task: the fan-in after a fan-out whose width is known
	// only at run time.
	Dependents []string
}

// Expand adds tasks to the running task's workflow, each depending on the
// running task (and as its Opts say on other tasks of the expansion). With
// tx nil, the usual case, the tasks are inserted in the transaction that
// records the running task's completion: an attempt that fails adds none,
// and a retry that calls Expand again adds them once. With a tx, they are
// inserted in it at once (say, in a StepTx, so that an expansion recorded
// with a step is never repeated); they wait in pending until the running
// task completes either way. Problems with the tasks (names, args, options,
// dependencies, MaxTasks) are errors naming the task; nothing is added.
func Expand(ctx context.Context, tx pgx.Tx, tasks ...ExpandTask) error {
	tc, err := taskFrom(ctx)
	if err != nil {
		return fmt.Errorf("workflow.Expand: %w", err)
	}
	if len(tasks) == 0 {
		return nil
	}
	defs, err := expandDefs(tc, tasks)
	if err != nil {
		return err
	}
	if tx == nil {
		// Checked here so the task fails with the reason; checked again
		// in the transaction that inserts them.
		if err := precheckExpand(ctx, tc, defs); err != nil {
			return err
		}
		tc.mu.Lock()
		defer tc.mu.Unlock()
		for _, d := range defs {
			for _, e := range tc.expand {
				if e.name == d.name {
					return &ValidationError{Workflow: tc.ref.WorkflowID, Task: d.name, Kind: ErrDuplicateTask, Detail: "is expanded twice"}
				}
			}
		}
		tc.expand = append(tc.expand, defs...)
		return nil
	}
	rc, err := river.ClientFromContextSafely[pgx.Tx](ctx)
	if err != nil {
		return fmt.Errorf("workflow.Expand: %w", err)
	}
	if _, err := lockWorkflows(ctx, tx, &tc.c.sql, []string{tc.ref.WorkflowID}); err != nil {
		return err
	}
	return insertExpanded(ctx, tx, &tc.c.sql, rc, tc.ref.WorkflowID, tc.ref.Task, defs, time.Now().UTC())
}

// precheckExpand checks an expansion against the workflow's tasks as they
// are now: new names, pending dependents.
func precheckExpand(ctx context.Context, tc *taskContext, defs []*taskDef) error {
	rows, err := tc.c.pool.Query(ctx, tc.c.sql.taskNamesStates, customPlan, tc.ref.WorkflowID)
	if err != nil {
		return ownRecord(fmt.Errorf("error reading the tasks of workflow %s: %w", tc.ref.WorkflowID, err))
	}
	existing := map[string]TaskState{}
	var n string
	var st TaskState
	if _, err := pgx.ForEachRow(rows, []any{&n, &st}, func() error { existing[n] = st; return nil }); err != nil {
		return ownRecord(fmt.Errorf("error reading the tasks of workflow %s: %w", tc.ref.WorkflowID, err))
	}
	return checkExpansion(tc.ref.WorkflowID, tc.ref.Task, existing, defs, len(tc.expand))
}

// checkExpansion checks expanded tasks against the workflow's tasks.
func checkExpansion(wf, parent string, existing map[string]TaskState, defs []*taskDef, staged int) error {
	vwf := &Workflow{name: wf}
	if total := len(existing) + staged + len(defs); total > MaxTasks {
		return vwf.errf("", ErrTooManyTasks, "would have %d tasks after the expansion of %q, more than the %d a workflow may have", total, parent, MaxTasks)
	}
	for _, d := range defs {
		if _, taken := existing[d.name]; taken {
			return vwf.errf(d.name, ErrDuplicateTask, "is expanded by %q but the workflow has a task of that name", parent)
		}
		for _, e := range d.extraDependents {
			if st, ok := existing[e]; !ok || st != TaskPending {
				return vwf.errf(d.name, ErrInvalidTask, "lists dependent %q, which is not a pending task of the workflow (it is %q)", e, st)
			}
		}
	}
	return nil
}

// expandDefs validates an expansion on its own (what needs no database).
func expandDefs(tc *taskContext, tasks []ExpandTask) ([]*taskDef, error) {
	wf := &Workflow{name: tc.ref.WorkflowID}
	byName := map[string]*taskDef{}
	defs := make([]*taskDef, 0, len(tasks))
	for _, t := range tasks {
		d := &taskDef{name: t.Name, args: t.Args}
		if t.Opts != nil {
			d.opts = *t.Opts
			d.opts.Deps = slices.Clone(t.Opts.Deps)
		}
		if err := checkName("task name", t.Name); err != nil {
			return nil, wf.errf(t.Name, ErrInvalidTask, "%v", err)
		}
		if t.Name == tc.ref.Task {
			return nil, wf.errf(t.Name, ErrDuplicateTask, "is the running task's name")
		}
		if _, dup := byName[t.Name]; dup {
			return nil, wf.errf(t.Name, ErrDuplicateTask, "is expanded twice")
		}
		byName[t.Name] = d
		defs = append(defs, d)
	}
	for i, d := range defs {
		if d.opts.RunIf != nil {
			return nil, wf.errf(d.name, ErrInvalidTask, "has a RunIf condition, which expanded tasks do not support")
		}
		// Deps name tasks of the expansion; the running task is added.
		for _, dep := range d.opts.Deps {
			if _, ok := byName[dep]; !ok {
				return nil, wf.errf(d.name, ErrUnknownDependency, "depends on %q, which is not a task of this expansion (an expanded task depends on the running task and on tasks of its expansion)", dep)
			}
		}
		if err := wf.validateTask(d, byName); err != nil {
			return nil, err
		}
		d.deps = append(d.deps, tc.ref.Task)
		d.extraDependents = slices.Clone(tasks[i].Dependents)
	}
	if cycle := findCycle(defs, withParent(byName, tc.ref.Task)); cycle != nil {
		return nil, wf.errf(cycle[0], ErrCycle, "is part of a cycle: %s", formatCycle(cycle))
	}
	return defs, nil
}

// withParent adds the running task, without dependencies, for findCycle.
func withParent(byName map[string]*taskDef, parent string) map[string]*taskDef {
	m := make(map[string]*taskDef, len(byName)+1)
	for k, v := range byName {
		m[k] = v
	}
	m[parent] = &taskDef{name: parent}
	return m
}

// insertExpanded inserts expanded tasks of workflow wf, below its running
// task parent, in tx, which holds the workflow's lock: their jobs (pending:
// each waits at least for parent), their rows, the parent's and the extra
// dependents' links, and the workflow's counts.
func insertExpanded(ctx context.Context, tx pgx.Tx, sql *statements, rc *river.Client[pgx.Tx], wf, parent string, defs []*taskDef, now time.Time) error {
	if rc == nil {
		return fmt.Errorf("workflow.Expand: no River client in the task's context")
	}
	rows, err := tx.Query(ctx, sql.taskNamesStates, customPlan, wf)
	if err != nil {
		return fmt.Errorf("error reading the tasks of workflow %s: %w", wf, err)
	}
	existing := map[string]TaskState{}
	var n string
	var st TaskState
	if _, err := pgx.ForEachRow(rows, []any{&n, &st}, func() error { existing[n] = st; return nil }); err != nil {
		return fmt.Errorf("error reading the tasks of workflow %s: %w", wf, err)
	}
	if err := checkExpansion(wf, parent, existing, defs, 0); err != nil {
		return err
	}
	extra := map[string][]string{} // existing task -> new tasks it must wait for
	for _, d := range defs {
		for _, e := range d.extraDependents {
			extra[e] = append(extra[e], d.name)
		}
	}
	dependents := map[string][]string{}
	for _, d := range defs {
		for _, dep := range d.deps {
			dependents[dep] = append(dependents[dep], d.name)
		}
	}
	params := make([]river.InsertManyParams, len(defs))
	for i, d := range defs {
		opts := river.InsertOpts{}
		if d.opts.InsertOpts != nil {
			opts = *d.opts.InsertOpts
		}
		if err := identify(&opts, d.args, wf, d.name, d.metadata); err != nil {
			return err
		}
		opts.Pending = true
		params[i] = river.InsertManyParams{Args: d.args, InsertOpts: &opts}
	}
	results, err := rc.InsertManyTx(ctx, tx, params)
	if err != nil {
		return fmt.Errorf("error inserting the jobs of the tasks %q expanded: %w", parent, err)
	}
	trows := make([]taskRow, len(defs))
	for i, d := range defs {
		job := results[i].Job
		deps := append([]string(nil), d.deps...)
		trows[i] = taskRow{
			Name: d.name, Position: len(existing) + i, Kind: job.Kind, Args: job.EncodedArgs, Queue: job.Queue,
			Priority: job.Priority, MaxAttempts: job.MaxAttempts, Tags: ownTags(job.Tags), Metadata: d.metadata,
			Deps: deps, Dependents: nonNil(append(dependents[d.name], d.extraDependents...)), PendingDeps: len(deps),
			OnDepFailure: d.opts.OnDepFailure, State: TaskPending, JobID: job.ID,
		}
	}
	doc, err := json.Marshal(trows)
	if err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, sql.insertTasks, customPlan, wf, string(doc), now); err != nil {
		return fmt.Errorf("error inserting the tasks %q expanded: %w", parent, err)
	}
	names, adds := []string{parent}, [][]string{dependents[parent]}
	for e, news := range extra {
		names, adds = append(names, e), append(adds, news)
	}
	for i, name := range names {
		if _, err := tx.Exec(ctx, sql.linkExpanded, customPlan, wf, name, adds[i], name == parent, now); err != nil {
			return fmt.Errorf("error linking the tasks %q expanded: %w", parent, err)
		}
	}
	if _, err := tx.Exec(ctx, sql.countExpanded, customPlan, wf, len(defs), now); err != nil {
		return fmt.Errorf("error counting the tasks %q expanded: %w", parent, err)
	}
	return nil
}

const taskNamesStatesSQL = `
SELECT name, state FROM /*schema*/tributary_workflow_task WHERE workflow_id = $1::uuid`

// linkExpandedSQL adds new dependents to a task: to the expanding task ($4)
// only the dependents; to a pending task that waits for them, also the
// dependencies and the count it waits for.
const linkExpandedSQL = `
UPDATE /*schema*/tributary_workflow_task
SET dependents = CASE WHEN $4 THEN dependents || $3::text[] ELSE dependents END,
    deps = CASE WHEN $4 THEN deps ELSE deps || $3::text[] END,
    pending_deps = CASE WHEN $4 THEN pending_deps ELSE pending_deps + cardinality($3::text[]) END,
    updated_at = $5
WHERE workflow_id = $1::uuid AND name = $2`

const countExpandedSQL = `
UPDATE /*schema*/tributary_workflow
SET task_count = task_count + $2, tasks_pending = tasks_pending + $2, updated_at = $3
WHERE id = $1::uuid`
