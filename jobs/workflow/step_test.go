package workflow_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/jobs/workflow"
	"github.com/tributary-run/tributary/queue"
)

// TestStepNotRerunAfterKill runs a task in a child process (this test
// binary, re-executed) until its step "one" is recorded (the record, not
// only the effect: a kill between the two runs the step again, by design)
// and the task sits
// between two steps, SIGKILLs the process, and lets a runtime in this
// process pick the task up once liveness hands it on: step "one" is not
// run again, the rest runs once.
func TestStepNotRerunAfterKill(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, db.Q(createEffectSQL))
	require.NoError(t, err)
	client := workflow.NewClient(db.Client(t))
	wf := workflow.New("crash", nil)
	wf.Add("t", durableArgs{Name: "t", BlockAfter: "one"}, &workflow.TaskOpts{InsertOpts: &river.InsertOpts{Queue: "crash"}})
	res, err := client.Insert(ctx, wf)
	require.NoError(t, err)

	cmd := exec.Command(os.Args[0], "-test.run=^TestDurableChildProcess$")
	pgtest.DieWithTest(cmd)
	cmd.Env = append(os.Environ(), "WFTEST_CHILD_SCHEMA="+db.Schema)
	stderr := &pgtest.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = stderr, stderr
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })

	waitStepRecorded(t, db, "t", "one")
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	<-exited
	require.Equal(t, 0, effects(t, db, "t", "tx"), "the child was killed before step tx: %s", stderr.String())

	b := setupDurable(t, db, queue.RuntimeConfig{Queues: map[string]int{"crash": 2}, LivenessTimeout: 2 * time.Second})
	d := b.waitStatus(t, res.ID, workflow.StatusCompleted)
	require.Equal(t, 1, effects(t, db, "t", "one"), "step one ran once")
	require.Equal(t, 1, effects(t, db, "t", "tx"))
	require.Equal(t, 1, effects(t, db, "t", "two"))
	out := durableOutputOf(t, taskByName(t, d, "t"))
	require.Equal(t, 1, out.One, "the recorded output of step one")
	require.Equal(t, 2, out.Two)
}

// TestDurableChildProcess is the child of TestStepNotRerunAfterKill: it
// works queue "crash" of the schema it is given until it is killed.
func TestDurableChildProcess(t *testing.T) {
	schema := os.Getenv("WFTEST_CHILD_SCHEMA")
	if schema == "" {
		return // not started as the child: nothing to do (the helper-process pattern)
	}
	db := &pgtest.DB{Pool: pgtest.Pool(t), Schema: schema, URL: pgtest.DatabaseURL()}
	setupDurable(t, db, queue.RuntimeConfig{Queues: map[string]int{"crash": 2}, LivenessTimeout: 2 * time.Second})
	select {} // until SIGKILL
}

func TestStepTxExactlyOnce(t *testing.T) {
	t.Parallel()
	b := setupDurable(t, nil, queue.RuntimeConfig{})
	ctx := context.Background()
	wf := workflow.New("retry", nil)
	// Attempt 1 records one and tx, then fails; attempt 2 gets both from
	// the record.
	wf.Add("t", durableArgs{Name: "t", FailOnce: true}, nil)
	res, err := b.client.Insert(ctx, wf)
	require.NoError(t, err)
	d := b.waitStatus(t, res.ID, workflow.StatusCompleted)
	task := taskByName(t, d, "t")
	require.Equal(t, 2, task.Attempts)
	require.Equal(t, 1, effects(t, b.db, "t", "one"))
	require.Equal(t, 1, effects(t, b.db, "t", "tx"), "StepTx's write happened once")
	require.Equal(t, 1, effects(t, b.db, "t", "two"))
}

func TestStepNameTwice(t *testing.T) {
	t.Parallel()
	b := setupDurable(t, nil, queue.RuntimeConfig{})
	ctx := context.Background()
	wf := workflow.New("twice", nil)
	wf.Add("t", durableArgs{Name: "t", StepTwice: true}, &workflow.TaskOpts{InsertOpts: &river.InsertOpts{MaxAttempts: 1}})
	res, err := b.client.Insert(ctx, wf)
	require.NoError(t, err)
	d := b.waitStatus(t, res.ID, workflow.StatusFailed)
	task := taskByName(t, d, "t")
	require.NotEmpty(t, task.Errors)
	require.Contains(t, task.Errors[len(task.Errors)-1].Error, `uses step name "one" twice in one run`)
}

func TestStepOutsideTask(t *testing.T) {
	t.Parallel()
	_, err := workflow.Step(context.Background(), "x", func(context.Context) (int, error) { return 1, nil })
	require.ErrorIs(t, err, workflow.ErrNotInTask)
	err = workflow.Sleep(context.Background(), "x", time.Second)
	require.ErrorIs(t, err, workflow.ErrNotInTask)
	_, err = workflow.AwaitSignal[int](context.Background(), "x", 0)
	require.ErrorIs(t, err, workflow.ErrNotInTask)
}

// TestSleepSurvivesRestart sleeps a task whose job has a single attempt,
// stops the runtime while it sleeps and starts another: the task wakes
// after its sleep, goes on past it, and the sleep used no attempt.
func TestSleepSurvivesRestart(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, db.Q(createEffectSQL))
	require.NoError(t, err)
	client := workflow.NewClient(db.Client(t))
	wf := workflow.New("sleepy", nil)
	wf.Add("t", durableArgs{Name: "t", SleepMS: 3000}, &workflow.TaskOpts{InsertOpts: &river.InsertOpts{MaxAttempts: 1, Queue: "sleep"}})
	res, err := client.Insert(ctx, wf)
	require.NoError(t, err)

	first := setupDurable(t, db, queue.RuntimeConfig{Queues: map[string]int{"sleep": 1}})
	waitSnoozed(t, db, res.Jobs["t"])
	stopCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	require.NoError(t, first.rt.Stop(stopCtx))
	require.Equal(t, 0, effects(t, db, "t", "woke"))
	var wake time.Time
	require.NoError(t, db.Pool.QueryRow(ctx, db.Q(`SELECT wake_at FROM /*schema*/tributary_workflow_step WHERE job_id = $1 AND name = 'nap'`), res.Jobs["t"]).Scan(&wake))

	second := setupDurable(t, db, queue.RuntimeConfig{Queues: map[string]int{"sleep": 1}})
	d := second.waitStatus(t, res.ID, workflow.StatusCompleted)
	task := taskByName(t, d, "t")
	require.Equal(t, 1, effects(t, db, "t", "one"))
	require.Equal(t, 1, effects(t, db, "t", "woke"))
	var woke time.Time
	require.NoError(t, db.Pool.QueryRow(ctx, db.Q(`SELECT at FROM /*schema*/wftest_effect WHERE task = 't' AND step = 'woke'`)).Scan(&woke))
	require.False(t, woke.Before(wake), "woke at %s, before the wake-up time %s", woke, wake)
	require.Equal(t, 1, task.Attempts, "the sleep used no attempt of the job's one")
	pgtest.WaitFor(t, 30*time.Second, "task t's job completed by River's completer", func() (bool, error) {
		job, err := second.rt.River().JobGet(ctx, res.Jobs["t"])
		return err == nil && job.State == rivertype.JobStateCompleted, err
	})
}

// TestStepOutputLimit: a step whose output is over StepOutputMaxBytes
// fails its task with a *LimitError naming the step, and records nothing.
func TestStepOutputLimit(t *testing.T) {
	t.Parallel()
	b := setupDurable(t, nil, queue.RuntimeConfig{})
	ctx := context.Background()
	wf := workflow.New("big", nil)
	wf.Add("t", durableArgs{Name: "t", BigStep: true}, &workflow.TaskOpts{InsertOpts: &river.InsertOpts{MaxAttempts: 1}})
	res, err := b.client.Insert(ctx, wf)
	require.NoError(t, err)
	d := b.waitStatus(t, res.ID, workflow.StatusFailed)
	task := taskByName(t, d, "t")
	require.Contains(t, task.Errors[len(task.Errors)-1].Error, fmt.Sprintf(`step output of "big" is %d, more than the limit of %d`, workflow.StepOutputMaxBytes+2, workflow.StepOutputMaxBytes))
	var n int
	require.NoError(t, b.db.Pool.QueryRow(ctx, b.db.Q(`SELECT count(*) FROM /*schema*/tributary_workflow_step WHERE name = 'big'`)).Scan(&n))
	require.Zero(t, n)
	var le *workflow.LimitError
	require.ErrorAs(t, error(&workflow.LimitError{}), &le)
	require.ErrorIs(t, error(&workflow.LimitError{}), workflow.ErrLimit)
}

// TestStepsPerTaskLimit: the step after MaxStepsPerTask in one run fails
// the task with a *LimitError.
func TestStepsPerTaskLimit(t *testing.T) {
	t.Parallel()
	b := setupDurable(t, nil, queue.RuntimeConfig{})
	ctx := context.Background()
	wf := workflow.New("many", nil)
	wf.Add("t", durableArgs{Name: "t", NoTxStep: true, ManySteps: workflow.MaxStepsPerTask}, &workflow.TaskOpts{InsertOpts: &river.InsertOpts{MaxAttempts: 1}})
	res, err := b.client.Insert(ctx, wf)
	require.NoError(t, err)
	d := b.waitStatus(t, res.ID, workflow.StatusFailed)
	task := taskByName(t, d, "t")
	// "one" first, then 999 of the many: the 1,000th of those is one too many.
	require.Contains(t, task.Errors[len(task.Errors)-1].Error, fmt.Sprintf(`steps per task of "t" is %d, more than the limit of %d`, workflow.MaxStepsPerTask+1, workflow.MaxStepsPerTask))
	require.Equal(t, workflow.MaxStepsPerTask, task.Steps)
}
