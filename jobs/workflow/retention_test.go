package workflow_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/jobs/workflow"
	"github.com/tributary-run/tributary/queue"
	"github.com/tributary-run/tributary/scheduler"
)

// TestRecordOutlivesRiverJobs: River's cleaner deletes finished jobs (after
// a day by default); the workflow's record stays whole, and a retry runs
// its tasks again from it.
func TestRecordOutlivesRiverJobs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.worker.SetFailing(true, "c")
	wf := workflow.New("w", nil)
	wf.Add("a", stepArgs{Name: "a", FailAttempts: 1}, &workflow.TaskOpts{InsertOpts: &river.InsertOpts{Queue: "default", Priority: 2, Tags: []string{"tag1"}}})
	wf.Add("b", stepArgs{Name: "b", Read: []string{"a"}}, &workflow.TaskOpts{Deps: []string{"a"}})
	wf.Add("c", stepArgs{Name: "c"}, once("a"))
	res, err := b.client.Insert(ctx, wf)
	require.NoError(t, err)
	before := b.waitStatus(t, res.ID, workflow.StatusFailed)
	// A success's job is completed by River's completer after the task's
	// record commits.
	pgtest.WaitFor(t, 30*time.Second, "the three jobs finalized", func() (bool, error) {
		n := 0
		for _, id := range res.Jobs {
			job, err := b.rt.River().JobGet(ctx, id)
			if err != nil {
				return false, err
			}
			if job.FinalizedAt != nil {
				n++
			}
		}
		return n == 3, nil
	})

	// What River's job cleaner does to finalized jobs, all at once.
	del, err := b.rt.River().JobDeleteMany(ctx, river.NewJobDeleteManyParams().
		States(rivertype.JobStateCompleted, rivertype.JobStateDiscarded, rivertype.JobStateCancelled))
	require.NoError(t, err)
	require.Len(t, del.Jobs, 3)
	require.Zero(t, b.db.CountJobs(t))

	after, err := b.client.Get(ctx, res.ID)
	require.NoError(t, err)
	require.Equal(t, before.Summary, after.Summary)
	require.Len(t, after.Tasks, 3)
	for i, task := range after.Tasks {
		require.Empty(t, task.JobState, "the job of %s is gone", task.Name)
		was := before.Tasks[i]
		was.JobState = ""
		require.Equal(t, was, task, "task %s is recorded whole", task.Name)
	}
	a := taskByName(t, after, "a")
	require.Equal(t, 2, a.Attempts)
	require.Len(t, a.Errors, 1)
	require.Equal(t, 2, a.Priority)
	require.Equal(t, []string{"tag1"}, a.Tags)
	require.NotNil(t, a.Output)
	require.Contains(t, taskByName(t, after, "c").Errors[0].Error, "step c is failing")

	// A retry inserts new jobs from the record.
	b.worker.SetFailing(false, "c")
	rres, err := b.client.Retry(ctx, res.ID, workflow.RetryAll)
	require.NoError(t, err)
	require.Len(t, rres.Jobs, 3)
	d := b.waitStatus(t, res.ID, workflow.StatusCompleted)
	job, err := b.rt.River().JobGet(ctx, taskByName(t, d, "a").JobID)
	require.NoError(t, err)
	require.Equal(t, 2, job.Priority, "the retried job has the task's insert options")
	require.Equal(t, []string{"tag1", "tributary_wf_" + res.ID, "tributary_task_a"}, job.Tags, "the task's tags and its identity")
	require.Equal(t, "wftest.step", job.Kind)
	require.JSONEq(t, `{"name":"a","fail_attempts":1}`, string(job.EncodedArgs))
}

// TestCleanup: the clean-up target deletes finished workflows past their
// retention with their tasks, in batches, and leaves recent and running
// ones alone.
func TestCleanup(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	client := workflow.NewClient(db.Client(t))
	ctx := context.Background()
	now := time.Now().UTC()

	var ids []string
	for i := range 5 {
		res, err := client.Insert(ctx, diamond(fmt.Sprint("w", i), nil))
		require.NoError(t, err)
		ids = append(ids, res.ID)
	}
	// Three finished long ago, one finished recently, one still running
	// (and old).
	setFinished := func(id string, at *time.Time) {
		_, err := db.Pool.Exec(ctx, db.Q(`UPDATE /*schema*/tributary_workflow SET status = CASE WHEN $2::timestamptz IS NULL THEN 'running' ELSE 'completed' END,
            finished_at = $2, created_at = $3 WHERE id = $1`), id, at, now.Add(-90*24*time.Hour))
		require.NoError(t, err)
	}
	old, recent := now.Add(-40*24*time.Hour), now.Add(-time.Hour)
	for _, id := range ids[:3] {
		setFinished(id, &old)
	}
	setFinished(ids[3], &recent)
	setFinished(ids[4], nil)

	target := workflow.Cleanup()
	cleaner, err := scheduler.NewCleaner(db.Client(t), scheduler.CleanerConfig{Targets: []queue.CleanupTarget{target}, Logger: pgtest.Logger(t),
		NowFunc: func() time.Time { return now }})
	require.NoError(t, err)
	out, err := cleaner.Clean(ctx, target.Name, target.Retention, 2)
	require.NoError(t, err)
	require.Equal(t, int64(3), out.Deleted, "in batches of 2")
	var workflows, tasks int
	require.NoError(t, db.Pool.QueryRow(ctx, db.Q(`SELECT (SELECT count(*) FROM /*schema*/tributary_workflow),
        (SELECT count(*) FROM /*schema*/tributary_workflow_task)`)).Scan(&workflows, &tasks))
	require.Equal(t, 2, workflows)
	require.Equal(t, 8, tasks, "the deleted workflows' tasks went with them")
	for _, id := range ids[3:] {
		_, err := client.Get(ctx, id)
		require.NoError(t, err)
	}
}
