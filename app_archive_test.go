package tributary_test

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary"
	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/jobs/batch"
	"github.com/tributary-run/tributary/jobs/workflow"
	"github.com/tributary-run/tributary/queue"
	"github.com/tributary-run/tributary/scheduler"
)

// TestAppArchivesWorkflows: with Cleanup.ArchiveWorkflows, the workflows
// clean-up writes a finished workflow into an object of the App's batch
// sink, records it and deletes the workflow.
func TestAppArchivesWorkflows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	dir := t.TempDir()
	app, err := tributary.New(db.Pool, tributary.Config{
		Schema: db.Schema, Logger: pgtest.Logger(t),
		Runtime: queue.RuntimeConfig{FetchPollInterval: 100 * time.Millisecond, ShutdownTimeout: 5 * time.Second},
		Cleanup: tributary.CleanupConfig{ArchiveWorkflows: true},
		Batch:   tributary.BatchConfig{SinkURL: "file://" + dir},
	})
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, db.Q(`INSERT INTO /*schema*/tributary_workflow (id, key, name, status, task_count, tasks_pending, tasks_active,
        tasks_completed, tasks_failed, tasks_cancelled, tasks_skipped, created_at, updated_at, finished_at)
        VALUES ('01900000-0000-7000-8000-000000000001', 'old-one', 'old', 'completed', 0, 0, 0, 0, 0, 0, 0,
        now() - interval '60 days', now() - interval '60 days', now() - interval '60 days')`))
	require.NoError(t, err)
	require.NoError(t, app.Start(ctx))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		require.NoError(t, app.Stop(ctx))
	})
	pgtest.WaitFor(t, 30*time.Second, "the clean-up schedule to be declared", func() (bool, error) {
		_, err := scheduler.Trigger(ctx, app.Runtime().Client, "tributary.cleanup.workflows", scheduler.TriggerOpts{})
		return err == nil, nil
	})
	pgtest.WaitFor(t, 60*time.Second, "the workflow to be archived to the sink and deleted", func() (bool, error) {
		var rows int
		if err := db.Pool.QueryRow(ctx, db.Q(`SELECT count(*) FROM /*schema*/tributary_workflow`)).Scan(&rows); err != nil {
			return false, err
		}
		var objects int
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err == nil && strings.HasSuffix(path, ".jsonl.gz") && strings.Contains(path, workflow.ArchiveStream) {
				objects++
			}
			return err
		})
		if os.IsNotExist(err) {
			err = nil
		}
		return rows == 0 && objects == 1, err
	})
	objs, err := batch.ListObjects(ctx, db.Pool, db.Schema, batch.ListObjectsParams{Stream: workflow.ArchiveStream})
	require.NoError(t, err)
	require.Len(t, objs, 1)
	require.Equal(t, 1, objs[0].Items)
	_, err = os.Stat(filepath.Join(dir, filepath.FromSlash(objs[0].Key)))
	require.NoError(t, err, "the recorded object is the one in the sink")
}
