package workflow_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/jobs/workflow"
)

// TestTaskIdentity: a task's job names its workflow and task in River tags
// and leaves its metadata to the task; a name that cannot be a tag goes into
// the metadata, and jobs that carry the identity in metadata only (inserted
// before the tags) still run as tasks.
func TestTaskIdentity(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()

	wf := workflow.New("w", nil)
	wf.Add("a", stepArgs{Name: "a"}, nil)
	wf.Add("charge card", stepArgs{Name: "charge card", Read: []string{"a"}}, &workflow.TaskOpts{Deps: []string{"a"}})
	wf.Add("c", stepArgs{Name: "c", Read: []string{"charge card"}}, &workflow.TaskOpts{Deps: []string{"charge card"}})

	var res *workflow.InsertResult
	legacy := "c"
	err := pgx.BeginFunc(ctx, b.db.Pool, func(tx pgx.Tx) error {
		var err error
		if res, err = b.client.InsertTx(ctx, tx, wf); err != nil {
			return err
		}
		// What a job of an older version carries.
		_, err = tx.Exec(ctx, b.db.Q(`UPDATE /*schema*/river_job SET tags = '{}',
            metadata = jsonb_build_object('tributary_workflow', $2::text, 'tributary_task', $3::text) WHERE id = $1`),
			res.Jobs[legacy], res.ID, legacy)
		return err
	})
	require.NoError(t, err)

	d := b.waitStatus(t, res.ID, workflow.StatusCompleted)
	for _, task := range d.Tasks {
		require.Empty(t, task.Tags, "task %s keeps only its own tags", task.Name)
		require.NotNil(t, task.Output, "task %s ran as a task and recorded its output", task.Name)
	}
	var out stepOutput
	require.NoError(t, json.Unmarshal(taskByName(t, d, "c").Output, &out))
	require.Contains(t, out.Read, "charge card", "the legacy job read its dependency's output")

	job := func(name string) ([]string, map[string]any) {
		j, err := b.rt.River().JobGet(ctx, res.Jobs[name])
		require.NoError(t, err)
		meta := map[string]any{}
		require.NoError(t, json.Unmarshal(j.Metadata, &meta))
		return j.Tags, meta
	}
	tags, meta := job("a")
	require.Equal(t, []string{"tributary_wf_" + res.ID, "tributary_task_a"}, tags)
	require.NotContains(t, meta, "tributary_workflow")
	require.NotContains(t, meta, "tributary_task")
	tags, meta = job("charge card")
	require.Equal(t, []string{"tributary_wf_" + res.ID}, tags)
	require.Equal(t, "charge card", meta["tributary_task"], "a name that is not tag-safe is in the metadata")
	require.NotContains(t, meta, "tributary_workflow")
}
