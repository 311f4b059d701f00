package workflow_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
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

// patchOutput is patchworker's Output.
type patchOutput struct {
	Code    string   `json:"code"`
	Patched bool     `json:"patched"`
	Ran     []string `json:"ran"`
}

type patchArgs struct{}

func (patchArgs) Kind() string { return "wftest.patch" }

// TestPatchedAcrossDeploy starts a task on old code, SIGKILLs its process
// after it recorded steps a and b, and resumes it on new code, which adds
// step x after a behind Patched: the old run skips x; a run started on the
// new code executes it.
func TestPatchedAcrossDeploy(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	bin := filepath.Join(t.TempDir(), "patchworker")
	out, err := exec.Command("go", "build", "-o", bin, "./internal/testproc/patchworker").CombinedOutput()
	require.NoError(t, err, "building the worker: %s", out)
	start := func(code, block string) (*exec.Cmd, chan struct{}, *pgtest.SyncBuffer) {
		cmd := exec.Command(bin)
		pgtest.DieWithTest(cmd)
		stderr := &pgtest.SyncBuffer{}
		cmd.Env = append(os.Environ(), "DATABASE_URL="+pgtest.URLWithPoolMax(5), "TRIBUTARY_SCHEMA="+db.Schema,
			"PATCH_CODE="+code, "PATCH_BLOCK="+block)
		cmd.Stderr = stderr
		require.NoError(t, cmd.Start())
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }()
		return cmd, exited, stderr
	}
	client := workflow.NewClient(db.Client(t))
	insert := func() string {
		wf := workflow.New("patched", nil)
		wf.Add("t", patchArgs{}, nil)
		res, err := client.Insert(ctx, wf)
		require.NoError(t, err)
		return res.ID
	}
	steps := func(id string) []string {
		rows, err := db.Pool.Query(ctx, db.Q(`SELECT name FROM /*schema*/tributary_workflow_step WHERE workflow_id = $1 ORDER BY created_at, name`), id)
		require.NoError(t, err)
		var names []string
		for rows.Next() {
			var n string
			require.NoError(t, rows.Scan(&n))
			names = append(names, n)
		}
		require.NoError(t, rows.Err())
		return names
	}

	old, oldExited, _ := start("old", "c")
	inFlight := insert()
	pgtest.WaitFor(t, time.Minute, "the old run to record steps a and b", func() (bool, error) {
		var n int
		err := db.Pool.QueryRow(ctx, db.Q(`SELECT count(*) FROM /*schema*/tributary_workflow_step WHERE workflow_id = $1 AND name IN ('a', 'b')`), inFlight).Scan(&n)
		return n == 2, err
	})
	require.NoError(t, old.Process.Signal(syscall.SIGKILL))
	<-oldExited

	neu, neuExited, stderr := start("new", "")
	t.Cleanup(func() {
		_ = neu.Process.Signal(syscall.SIGTERM)
		<-neuExited
		if t.Failed() {
			t.Logf("new process stderr:\n%s", stderr.String())
		}
	})
	awaitOutput := func(id string) patchOutput {
		actx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		o, err := client.Await(actx, id)
		require.NoError(t, err)
		require.Equal(t, workflow.StatusCompleted, o.Status)
		var p patchOutput
		require.NoError(t, o.Output("t", &p))
		return p
	}
	resumed := awaitOutput(inFlight)
	require.Equal(t, patchOutput{Code: "new", Patched: false, Ran: []string{"c"}}, resumed,
		"the old run resumes on new code, replays a and b and skips x")
	require.ElementsMatch(t, []string{"a", "b", "patch:add-x", "c"}, steps(inFlight), "no step x in the old run")

	fresh := insert()
	started := awaitOutput(fresh)
	require.Equal(t, patchOutput{Code: "new", Patched: true, Ran: []string{"a", "x", "b", "c"}}, started, "a new run takes the patch")
	require.ElementsMatch(t, []string{"a", "patch:add-x", "x", "b", "c"}, steps(fresh))

	var marker json.RawMessage
	require.NoError(t, db.Pool.QueryRow(ctx, db.Q(`SELECT output FROM /*schema*/tributary_workflow_step WHERE workflow_id = $1 AND name = 'patch:add-x'`), inFlight).Scan(&marker))
	require.JSONEq(t, `false`, string(marker), "the decision is recorded for later attempts")
}

// patchRetryArgs is a task on new code whose first attempt fails after
// the patched step.
type patchRetryArgs struct{}

func (patchRetryArgs) Kind() string { return "wftest.patch_retry" }

type patchRetryWorker struct {
	river.WorkerDefaults[patchRetryArgs]
}

func (patchRetryWorker) NextRetry(*river.Job[patchRetryArgs]) time.Time {
	return time.Now().Add(10 * time.Millisecond)
}

func (patchRetryWorker) Work(ctx context.Context, job *river.Job[patchRetryArgs]) error {
	var ran []string
	step := func(name string) error {
		_, err := workflow.Step(ctx, name, func(context.Context) (string, error) {
			ran = append(ran, name)
			return name, nil
		})
		return err
	}
	if err := step("a"); err != nil {
		return err
	}
	patched, err := workflow.Patched(ctx, "add-x")
	if err != nil {
		return err
	}
	if patched {
		if err := step("x"); err != nil {
			return err
		}
	}
	if job.Attempt == 1 {
		return errors.New("the first attempt dies after x")
	}
	if err := step("b"); err != nil {
		return err
	}
	if _, err := workflow.Step(ctx, "patch:sneaky", func(context.Context) (int, error) { return 0, nil }); err == nil {
		return errors.New("a user step named patch:... was accepted")
	}
	return workflow.SetOutput(ctx, patchOutput{Code: "new", Patched: patched, Ran: ran})
}

// TestPatchedIsRecorded: a run on new code that recorded the patched step
// and failed gets the same decision on its next attempt (its record x is
// one this attempt has not reached when it asks, but the recorded decision
// holds).
func TestPatchedIsRecorded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	coord, err := workflow.NewCoordinator(db.Pool, workflow.CoordinatorConfig{Schema: db.Schema, Logger: pgtest.Logger(t)})
	require.NoError(t, err)
	rt := pgtest.StartRuntime(t, db, queue.RuntimeConfig{Middleware: []rivertype.Middleware{coord.Middleware()}}, func(rt *queue.Runtime) {
		queue.AddWorker(rt, patchRetryWorker{})
		require.NoError(t, coord.Register(rt))
	})
	client := workflow.NewClient(rt.Client)
	wf := workflow.New("patched", nil)
	wf.Add("t", patchRetryArgs{}, nil)
	res, err := client.Insert(ctx, wf)
	require.NoError(t, err)
	out, err := workflow.AwaitResult[patchOutput](ctx, client, res.ID, "t")
	require.NoError(t, err)
	require.Equal(t, patchOutput{Code: "new", Patched: true, Ran: []string{"b"}}, out, "a and x replayed, the patch still taken")
}
