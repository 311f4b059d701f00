package riverjob_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/internal/riverjob"
	"github.com/tributary-run/tributary/queue"
)

type testArgs struct {
	N int `json:"n"`
}

func (testArgs) Kind() string { return "riverjob.test" }

type testBundle struct {
	db     *pgtest.DB
	client *queue.Client
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	db := pgtest.New(t)
	return &testBundle{db: db, client: db.Client(t)}
}

// insert inserts a job with opts and returns its row.
func (b *testBundle) insert(t *testing.T, n int, opts *river.InsertOpts) *rivertype.JobRow {
	t.Helper()
	res, err := b.client.River().Insert(context.Background(), testArgs{N: n}, opts)
	require.NoError(t, err)
	return res.Job
}

// setRunning puts a job into the state a producer's fetch leaves it in.
func (b *testBundle) setRunning(t *testing.T, id int64) {
	t.Helper()
	_, err := b.db.Pool.Exec(context.Background(), b.db.Q(`UPDATE /*schema*/river_job
        SET state = 'running', attempt = attempt + 1, attempted_at = now(), attempted_by = array_append(attempted_by, 'test')
        WHERE id = $1`), id)
	require.NoError(t, err)
}

func (b *testBundle) get(t *testing.T, id int64) *rivertype.JobRow {
	t.Helper()
	job, err := b.client.River().JobGet(context.Background(), id)
	require.NoError(t, err)
	return job
}

func TestPromote(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	now := time.Now().UTC()

	due := b.insert(t, 1, &river.InsertOpts{Pending: true, Queue: "q1"})
	due2 := b.insert(t, 2, &river.InsertOpts{Pending: true, Queue: "q1"})
	later := b.insert(t, 3, &river.InsertOpts{Pending: true, Queue: "q2", ScheduledAt: now.Add(time.Hour)})
	avail := b.insert(t, 4, &river.InsertOpts{Queue: "q3"})
	require.Equal(t, rivertype.JobStatePending, due.State)

	before := time.Now()
	queues, err := riverjob.Promote(ctx, b.db.Pool, b.db.Schema, []int64{due.ID, due2.ID, later.ID, avail.ID, 999999})
	require.NoError(t, err)
	require.Equal(t, []string{"q1", "q2"}, queues, "the queues of the promoted jobs, once each")

	got := b.get(t, due.ID)
	require.Equal(t, rivertype.JobStateAvailable, got.State)
	require.WithinDuration(t, before, got.ScheduledAt, time.Second, "a promoted job queues from now")
	require.True(t, got.ScheduledAt.After(due.ScheduledAt))
	got = b.get(t, later.ID)
	require.Equal(t, rivertype.JobStateScheduled, got.State, "a job scheduled for later waits for River's scheduler")
	require.WithinDuration(t, now.Add(time.Hour), got.ScheduledAt, time.Millisecond)
	require.Equal(t, avail.ScheduledAt, b.get(t, avail.ID).ScheduledAt, "a job that was not pending is untouched")

	queues, err = riverjob.Promote(ctx, b.db.Pool, b.db.Schema, nil)
	require.NoError(t, err)
	require.Empty(t, queues)

	// Inserted and released in one transaction: River stamps scheduled_at
	// with the process's clock, after the transaction's now(); the job is
	// due all the same, and queues from now().
	tx, err := b.db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	var txStart time.Time
	require.NoError(t, tx.QueryRow(ctx, "SELECT now()").Scan(&txStart))
	res, err := b.client.River().InsertTx(ctx, tx, testArgs{N: 5}, &river.InsertOpts{Pending: true, Queue: "q4"})
	require.NoError(t, err)
	require.True(t, res.Job.ScheduledAt.After(txStart), "River's insert time is after the transaction's now()")
	queues, err = riverjob.Promote(ctx, tx, b.db.Schema, []int64{res.Job.ID})
	require.NoError(t, err)
	require.Equal(t, []string{"q4"}, queues)
	var state string
	var scheduledAt time.Time
	require.NoError(t, tx.QueryRow(ctx, b.db.Q(`SELECT state::text, scheduled_at FROM /*schema*/river_job WHERE id = $1`), res.Job.ID).Scan(&state, &scheduledAt))
	require.Equal(t, "available", state, "a job inserted without a ScheduledAt is due when released")
	require.True(t, scheduledAt.Equal(txStart), "it queues from the transaction's now()")
}

func TestCancelUnstarted(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	now := time.Now().UTC()

	pending := b.insert(t, 1, &river.InsertOpts{Pending: true})
	avail := b.insert(t, 2, nil)
	sched := b.insert(t, 3, &river.InsertOpts{ScheduledAt: now.Add(time.Hour)})
	running := b.insert(t, 4, nil)
	b.setRunning(t, running.ID)

	ids, err := riverjob.CancelUnstarted(ctx, b.db.Pool, b.db.Schema, []int64{pending.ID, avail.ID, sched.ID, running.ID}, now)
	require.NoError(t, err)
	require.ElementsMatch(t, []int64{pending.ID, avail.ID, sched.ID}, ids)
	for _, id := range ids {
		got := b.get(t, id)
		require.Equal(t, rivertype.JobStateCancelled, got.State)
		require.NotNil(t, got.FinalizedAt)
		var meta map[string]any
		require.NoError(t, json.Unmarshal(got.Metadata, &meta))
		require.Contains(t, meta, "cancel_attempted_at", "as River's JobCancel marks it")
	}
	require.Equal(t, rivertype.JobStateRunning, b.get(t, running.ID).State, "a running job is left to JobCancelTx")

	// River's own retry of a job cancelled this way runs it again, so the
	// mark is what River expects.
	retried, err := b.client.River().JobRetry(ctx, pending.ID)
	require.NoError(t, err)
	require.Equal(t, rivertype.JobStateAvailable, retried.State)
}

func TestFinalizeRunning(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	now := time.Now().UTC()

	discard := b.insert(t, 1, nil)
	cancel := b.insert(t, 2, nil)
	stale := b.insert(t, 3, nil)
	notRunning := b.insert(t, 4, nil)
	for _, id := range []int64{discard.ID, cancel.ID, stale.ID} {
		b.setRunning(t, id)
	}
	ae := rivertype.AttemptError{At: now, Attempt: 1, Error: "boom", Trace: "trace"}
	ids, err := riverjob.FinalizeRunning(ctx, b.db.Pool, b.db.Schema, []riverjob.Final{
		{ID: discard.ID, Attempt: 1, State: rivertype.JobStateDiscarded, Error: ae},
		{ID: cancel.ID, Attempt: 1, State: rivertype.JobStateCancelled, Error: ae},
		{ID: stale.ID, Attempt: 2, State: rivertype.JobStateDiscarded, Error: ae},
		{ID: notRunning.ID, Attempt: 0, State: rivertype.JobStateDiscarded, Error: ae},
	}, now)
	require.NoError(t, err)
	require.ElementsMatch(t, []int64{discard.ID, cancel.ID}, ids, "only running jobs at the given attempt")

	got := b.get(t, discard.ID)
	require.Equal(t, rivertype.JobStateDiscarded, got.State)
	require.NotNil(t, got.FinalizedAt)
	require.Len(t, got.Errors, 1)
	require.Equal(t, "boom", got.Errors[0].Error)
	require.Equal(t, "trace", got.Errors[0].Trace)
	require.Equal(t, rivertype.JobStateCancelled, b.get(t, cancel.ID).State)
	require.Equal(t, rivertype.JobStateRunning, b.get(t, stale.ID).State)
	require.Equal(t, rivertype.JobStateAvailable, b.get(t, notRunning.ID).State)

	_, err = riverjob.FinalizeRunning(ctx, b.db.Pool, b.db.Schema, []riverjob.Final{{ID: 1, State: rivertype.JobStateCompleted}}, now)
	require.ErrorContains(t, err, `invalid final state "completed"`)
}

func TestCompleteRunning(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	now := time.Now().UTC()
	first := b.insert(t, 1, nil)
	second := b.insert(t, 2, nil)
	stale := b.insert(t, 3, nil)
	notRunning := b.insert(t, 4, nil)
	for _, id := range []int64{first.ID, second.ID, stale.ID} {
		b.setRunning(t, id)
	}
	ids, err := riverjob.CompleteRunning(ctx, b.db.Pool, b.db.Schema, []riverjob.Attempt{
		{ID: first.ID, Attempt: 1}, {ID: second.ID, Attempt: 1}, {ID: stale.ID, Attempt: 2}, {ID: notRunning.ID, Attempt: 0},
	}, now)
	require.NoError(t, err)
	require.ElementsMatch(t, []int64{first.ID, second.ID}, ids)
	got := b.get(t, first.ID)
	require.Equal(t, rivertype.JobStateCompleted, got.State)
	require.WithinDuration(t, now, *got.FinalizedAt, time.Millisecond)
	require.Equal(t, rivertype.JobStateRunning, b.get(t, stale.ID).State)
	require.Equal(t, rivertype.JobStateAvailable, b.get(t, notRunning.ID).State)
	ids, err = riverjob.CompleteRunning(ctx, b.db.Pool, b.db.Schema, nil, now)
	require.NoError(t, err)
	require.Empty(t, ids)
}

func TestScanWorkflowTasks(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	now := time.Now().UTC()

	completed := b.insert(t, 1, nil)
	b.setRunning(t, completed.ID)
	_, err := b.db.Pool.Exec(ctx, b.db.Q(`UPDATE /*schema*/river_job SET state = 'completed', finalized_at = now() WHERE id = $1`), completed.ID)
	require.NoError(t, err)
	discarded := b.insert(t, 2, nil)
	b.setRunning(t, discarded.ID)
	_, err = riverjob.FinalizeRunning(ctx, b.db.Pool, b.db.Schema, []riverjob.Final{{ID: discarded.ID, Attempt: 1, State: rivertype.JobStateDiscarded,
		Error: rivertype.AttemptError{At: now, Attempt: 1, Error: "gave up"}}}, now)
	require.NoError(t, err)
	cancelled := b.insert(t, 3, nil)
	_, err = b.client.River().JobCancel(ctx, cancelled.ID)
	require.NoError(t, err)
	pending := b.insert(t, 4, &river.InsertOpts{Pending: true})
	running := b.insert(t, 5, nil)
	b.setRunning(t, running.ID)
	recent := b.insert(t, 6, nil)
	b.setRunning(t, recent.ID)
	_, err = b.db.Pool.Exec(ctx, b.db.Q(`UPDATE /*schema*/river_job SET state = 'completed', finalized_at = now() WHERE id = $1`), recent.ID)
	require.NoError(t, err)
	waiting := b.insert(t, 7, &river.InsertOpts{Pending: true})
	undecided := b.insert(t, 8, &river.InsertOpts{Pending: true})

	// Two workflows: the first's tasks in every state the scan tells apart,
	// the second's one undecided task. UUIDv7s ascend.
	first, second := uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())
	for _, wf := range []uuid.UUID{first, second} {
		_, err = b.db.Pool.Exec(ctx, b.db.Q(`INSERT INTO /*schema*/tributary_workflow
            (id, name, status, task_count, tasks_pending, tasks_active, tasks_completed, tasks_failed, tasks_cancelled, tasks_skipped, created_at, updated_at)
            VALUES ($1, 'w', 'running', 9, 2, 7, 0, 0, 0, 0, $2, $2)`), wf, now)
		require.NoError(t, err)
	}
	old := now.Add(-time.Minute)
	for _, task := range []struct {
		wf          uuid.UUID
		name, state string
		pendingDeps int
		jobID       int64
		updated     time.Time
	}{
		{first, "completed", "active", 0, completed.ID, old}, {first, "discarded", "active", 0, discarded.ID, old},
		{first, "cancelled", "active", 0, cancelled.ID, old}, {first, "pending", "active", 0, pending.ID, old},
		{first, "running", "active", 0, running.ID, old}, {first, "recent", "active", 0, recent.ID, now},
		{first, "deleted", "active", 0, 424242, old}, {first, "waiting", "pending", 1, waiting.ID, old},
		{first, "undecided", "pending", 0, undecided.ID, old},
		{second, "undecided", "pending", 0, 424243, old},
	} {
		_, err = b.db.Pool.Exec(ctx, b.db.Q(`INSERT INTO /*schema*/tributary_workflow_task
            (workflow_id, name, position, kind, args, queue, priority, max_attempts, tags, metadata, deps, dependents, pending_deps, failed_deps,
             on_dep_failure, state, job_id, run, attempts, errors, created_at, updated_at)
            VALUES ($1, $2, 0, 'riverjob.test', '{}', 'default', 1, 25, '{}', '{}', '{}', '{}', $3, 0, 'cancel', $4, $5, 1, 0, '[]', $6, $6)`),
			task.wf, task.name, task.pendingDeps, task.state, task.jobID, task.updated)
		require.NoError(t, err)
	}
	quiet := now.Add(-10 * time.Second)
	ids := []string{first.String(), second.String()}

	page, err := riverjob.ScanWorkflowTasks(ctx, b.db.Pool, b.db.Schema, quiet, ids, "", 100)
	require.NoError(t, err)
	require.Equal(t, 10, page.Read, "every task of both workflows")
	require.Equal(t, riverjob.TaskKey{WorkflowID: second.String(), Task: "undecided"}, page.Last)
	require.Equal(t, []riverjob.TaskKey{{WorkflowID: first.String(), Task: "undecided"}, {WorkflowID: second.String(), Task: "undecided"}}, page.Undecided,
		"pending tasks with nothing to wait for; not the one waiting for a dependency")
	byTask := map[string]riverjob.Settled{}
	for _, s := range page.Settled {
		require.Equal(t, first.String(), s.WorkflowID)
		byTask[s.Task] = s
	}
	require.Len(t, byTask, 5, "finalized, pending and deleted jobs of quiet tasks: %v", byTask)
	require.Equal(t, rivertype.JobStateCompleted, byTask["completed"].JobState)
	require.Equal(t, rivertype.JobStateDiscarded, byTask["discarded"].JobState)
	require.Len(t, byTask["discarded"].Errors, 1)
	require.Equal(t, "gave up", byTask["discarded"].Errors[0].Error)
	require.Equal(t, 1, byTask["discarded"].Attempt)
	require.Equal(t, rivertype.JobStateCancelled, byTask["cancelled"].JobState)
	require.True(t, byTask["cancelled"].CancelAttempted)
	require.False(t, byTask["discarded"].CancelAttempted)
	require.Equal(t, rivertype.JobStatePending, byTask["pending"].JobState)
	require.Equal(t, rivertype.JobState(""), byTask["deleted"].JobState)
	require.NotContains(t, byTask, "running")
	require.NotContains(t, byTask, "recent", "a task changed within the quiet time is left alone")

	// Pages of three, each continuing after the last one's last task: the
	// ten tasks in four pages, the same five settled and two undecided.
	after := riverjob.TaskKey{WorkflowID: first.String()}
	paged := map[riverjob.TaskKey]bool{}
	read := 0
	for p := 0; ; p++ {
		require.Less(t, p, 4)
		from := ids
		if after.WorkflowID == second.String() {
			from = ids[1:]
		}
		got, err := riverjob.ScanWorkflowTasks(ctx, b.db.Pool, b.db.Schema, quiet, from, after.Task, 3)
		require.NoError(t, err)
		read += got.Read
		for _, s := range got.Settled {
			k := riverjob.TaskKey{WorkflowID: s.WorkflowID, Task: s.Task}
			require.False(t, paged[k], "task %v seen twice", k)
			paged[k] = true
		}
		for _, k := range got.Undecided {
			require.False(t, paged[k], "task %v seen twice", k)
			paged[k] = true
		}
		if got.Read < 3 {
			break
		}
		after = got.Last
	}
	require.Equal(t, 10, read)
	require.Len(t, paged, 7)

	page, err = riverjob.ScanWorkflowTasks(ctx, b.db.Pool, b.db.Schema, quiet, nil, "", 100)
	require.NoError(t, err)
	require.Zero(t, page.Read, "no workflows, no tasks")
}

func TestWake(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := b.db.Pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	channel := b.db.Schema + ".river_insert"
	_, err = conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize())
	require.NoError(t, err)
	defer func() { _, _ = conn.Exec(context.Background(), "UNLISTEN *") }()

	require.NoError(t, riverjob.Wake(ctx, b.db.Pool, b.db.Schema, []string{"alpha", "beta"}))
	got := map[string]bool{}
	for range 2 {
		n, err := conn.Conn().WaitForNotification(ctx)
		require.NoError(t, err)
		require.Equal(t, channel, n.Channel)
		var p struct {
			Queue string `json:"queue"`
		}
		require.NoError(t, json.Unmarshal([]byte(n.Payload), &p))
		got[p.Queue] = true
	}
	require.Equal(t, map[string]bool{"alpha": true, "beta": true}, got)
	require.NoError(t, riverjob.Wake(ctx, b.db.Pool, b.db.Schema, nil))
}

func TestRawArgs(t *testing.T) {
	t.Parallel()
	b := setup(t)
	res, err := b.client.River().Insert(context.Background(), riverjob.RawArgs("riverjob.test", json.RawMessage(`{"n":5}`)), &river.InsertOpts{Queue: "raw"})
	require.NoError(t, err)
	require.Equal(t, "riverjob.test", res.Job.Kind)
	require.JSONEq(t, `{"n":5}`, string(res.Job.EncodedArgs))
	require.Equal(t, "raw", res.Job.Queue)
}
