package tributary_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary"
	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/jobs/workflow"
	"github.com/tributary-run/tributary/queue"
	"github.com/tributary-run/tributary/scheduler"
)

// TestAppScheduleStartsWorkflow: an App with Config.Workflows works the
// jobs of schedules that start a registered workflow.
func TestAppScheduleStartsWorkflow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	reg := workflow.NewRegistry()
	require.NoError(t, reg.Register("greet", func(wf *workflow.Workflow, _ json.RawMessage) error {
		wf.Add("hello", pingArgs{N: 7}, nil)
		return nil
	}))
	app, err := tributary.New(db.Pool, tributary.Config{
		Schema: db.Schema, Logger: pgtest.Logger(t), Workflows: reg,
		Runtime:   queue.RuntimeConfig{FetchPollInterval: 100 * time.Millisecond, ShutdownTimeout: 5 * time.Second},
		Schedules: []scheduler.Schedule{{Name: "greet.every-second", Spec: "@every 1s", Args: workflow.StartArgs{Workflow: "greet", Overlap: workflow.OverlapSkip}}},
	})
	require.NoError(t, err)
	tributary.AddWorker(app, river.WorkFunc(func(ctx context.Context, job *river.Job[pingArgs]) error { return nil }))
	require.NoError(t, app.Start(ctx))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		require.NoError(t, app.Stop(ctx))
	})
	pgtest.WaitFor(t, 30*time.Second, "the schedule to start a workflow that completes", func() (bool, error) {
		res, err := app.Workflows().List(ctx, workflow.ListParams{
			Attributes: map[string]string{workflow.AttrSchedule: "greet.every-second"}, Statuses: []workflow.Status{workflow.StatusCompleted}})
		return err == nil && len(res.Workflows) > 0, err
	})
}
