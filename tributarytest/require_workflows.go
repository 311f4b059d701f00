package tributarytest

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tributary-run/tributary/jobs/workflow"
	"github.com/tributary-run/tributary/queue"
)

// RequireWorkflowStartedOpts narrow what RequireWorkflowStarted looks for;
// a zero field is not checked. A nil *RequireWorkflowStartedOpts checks
// the name only.
type RequireWorkflowStartedOpts struct {
	// Schema holds tributary's tables. Defaults to the connection's
	// current schema: the test's schema on a DB's pool.
	Schema string
	// Key is the workflow's idempotency key (workflow.Opts.ID).
	Key string
	// Status is the workflow's status, for a test that also ran it
	// (workflow.StatusCompleted after WorkUntilIdle).
	Status workflow.Status
}

// StartedWorkflow is a workflow as RequireWorkflowStarted found it.
type StartedWorkflow struct {
	// ID is the workflow's id, for workflow.Client's Get, Signal, Cancel
	// and Retry.
	ID string
	// Key is workflow.Opts.ID as given, empty if none was.
	Key    string
	Name   string
	Status workflow.Status
	// Tasks are the task names in the order they were added.
	Tasks []string
}

// Reading a workflow in the caller's transaction needs tributary_workflow's
// rows directly: workflow.Client reads on its own pool. The columns are the
// record's identity and status only.
const (
	listWorkflowsSQL = `SELECT id::text, coalesce(key, ''), name, status FROM /*schema*/tributary_workflow ORDER BY created_at, id LIMIT $1`
	listTasksSQL     = `SELECT name FROM /*schema*/tributary_workflow_task WHERE workflow_id = $1::uuid ORDER BY position`
)

// RequireWorkflowStartedTx requires that exactly one workflow named name
// matching opts is visible in tx (so a workflow the transaction started
// and has not committed counts), and returns it. Otherwise the test fails
// with the workflows found instead.
//
//	wf := tributarytest.RequireWorkflowStartedTx(ctx, t, tx, "fulfil", &tributarytest.RequireWorkflowStartedOpts{Key: "fulfil-o-1"})
func RequireWorkflowStartedTx(ctx context.Context, tb testing.TB, tx pgx.Tx, name string, opts *RequireWorkflowStartedOpts) *StartedWorkflow {
	tb.Helper()
	wf, err := requireWorkflowStarted(ctx, tx, name, opts)
	if err != nil {
		tb.Fatalf("tributarytest: %v", err)
	}
	return wf
}

// RequireWorkflowStarted is RequireWorkflowStartedTx on what has been
// committed: it reads in a transaction of its own on pool.
func RequireWorkflowStarted(ctx context.Context, tb testing.TB, pool *pgxpool.Pool, name string, opts *RequireWorkflowStartedOpts) *StartedWorkflow {
	tb.Helper()
	var wf *StartedWorkflow
	err := readTx(ctx, pool, func(tx pgx.Tx) (err error) {
		wf, err = requireWorkflowStarted(ctx, tx, name, opts)
		return err
	})
	if err != nil {
		tb.Fatalf("tributarytest: %v", err)
	}
	return wf
}

func requireWorkflowStarted(ctx context.Context, tx pgx.Tx, name string, opts *RequireWorkflowStartedOpts) (*StartedWorkflow, error) {
	if opts == nil {
		opts = &RequireWorkflowStartedOpts{}
	}
	schema, err := schemaOf(ctx, tx, opts.Schema)
	if err != nil {
		return nil, err
	}
	rows, err := tx.Query(ctx, queue.Qualify(schema, listWorkflowsSQL), listLimit)
	if err != nil {
		return nil, fmt.Errorf("error listing workflows in schema %s: %w", schema, err)
	}
	all, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*StartedWorkflow, error) {
		var wf StartedWorkflow
		return &wf, r.Scan(&wf.ID, &wf.Key, &wf.Name, &wf.Status)
	})
	if err != nil {
		return nil, fmt.Errorf("error listing workflows in schema %s: %w", schema, err)
	}
	var named, matched []*StartedWorkflow
	for _, wf := range all {
		if wf.Name != name {
			continue
		}
		named = append(named, wf)
		if (opts.Key == "" || wf.Key == opts.Key) && (opts.Status == "" || wf.Status == opts.Status) {
			matched = append(matched, wf)
		}
	}
	switch {
	case len(named) == 0:
		return nil, fmt.Errorf("no workflow named %q in schema %s; found instead %s", name, schema, describeWorkflows(all))
	case len(matched) == 0:
		return nil, fmt.Errorf("no workflow named %q with %s in schema %s; found instead %s", name, opts.describe(), schema, describeWorkflows(named))
	case len(matched) > 1:
		return nil, fmt.Errorf("%d workflows named %q with %s in schema %s, want one (narrow the options): %s", len(matched), name, opts.describe(), schema, describeWorkflows(matched))
	}
	wf := matched[0]
	rows, err = tx.Query(ctx, queue.Qualify(schema, listTasksSQL), wf.ID)
	if err != nil {
		return nil, fmt.Errorf("error listing the tasks of workflow %s: %w", wf.ID, err)
	}
	if wf.Tasks, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		return nil, fmt.Errorf("error listing the tasks of workflow %s: %w", wf.ID, err)
	}
	return wf, nil
}

// describe names the options that are set, as a failure message shows them.
func (o *RequireWorkflowStartedOpts) describe() string {
	var parts []string
	if o.Key != "" {
		parts = append(parts, fmt.Sprintf("key %q", o.Key))
	}
	if o.Status != "" {
		parts = append(parts, fmt.Sprintf("status %s", o.Status))
	}
	if len(parts) == 0 {
		return "any options"
	}
	return strings.Join(parts, ", ")
}

func describeWorkflows(wfs []*StartedWorkflow) string {
	if len(wfs) == 0 {
		return "no workflows at all"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d workflow(s):", len(wfs))
	for i, wf := range wfs {
		if i == showLimit {
			fmt.Fprintf(&b, "\n\t... and %d more", len(wfs)-showLimit)
			break
		}
		fmt.Fprintf(&b, "\n\tworkflow %s name %q key %q status %s", wf.ID, wf.Name, wf.Key, wf.Status)
	}
	return b.String()
}
