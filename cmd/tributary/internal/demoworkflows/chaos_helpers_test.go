package demoworkflows_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/cmd/tributary/internal/demoworkflows"
	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/jobs/workflow"
	"github.com/tributary-run/tributary/queue"
)

// createEffectSQL is the table demo.approval's steps write their side
// effects to in the chaos runs (StepFunc, in each step's transaction).
const createEffectSQL = `
CREATE TABLE /*schema*/approval_effect (workflow_id text NOT NULL, step text NOT NULL, process text NOT NULL)`

// TestApprovalWorkerProcess is a worker process of the approval runs (this
// test binary, re-executed): demo.approval's worker until it is killed or
// told to stop.
func TestApprovalWorkerProcess(t *testing.T) {
	schema := os.Getenv("APPROVAL_WORKER_SCHEMA")
	if schema == "" {
		return // not started as a worker process: nothing to do (the helper-process pattern)
	}
	name := os.Getenv("APPROVAL_WORKER_NAME")
	db := &pgtest.DB{Pool: pgtest.Pool(t), Schema: schema, URL: pgtest.DatabaseURL()}
	coord, err := workflow.NewCoordinator(db.Pool, workflow.CoordinatorConfig{Schema: schema, Logger: pgtest.Logger(t), RepairInterval: time.Second})
	require.NoError(t, err)
	insert := db.Q(`INSERT INTO /*schema*/approval_effect (workflow_id, step, process) VALUES ($1, $2, $3)`)
	pgtest.StartRuntime(t, db, queue.RuntimeConfig{
		Middleware: []rivertype.Middleware{coord.Middleware()}, LivenessTimeout: 2 * time.Second,
		Queues: map[string]int{"default": 20}, FetchPollInterval: 200 * time.Millisecond,
	}, func(rt *queue.Runtime) {
		require.NoError(t, demoworkflows.RegisterWorkflowsII(workflow.NewRegistry(), rt, demoworkflows.WorkflowsIIConfig{
			StepFunc: func(ctx context.Context, tx pgx.Tx, wf, step string) error {
				_, err := tx.Exec(ctx, insert, wf, step, name)
				return err
			},
		}))
		require.NoError(t, coord.Register(rt))
	})
	select {}
}

type workerProc struct {
	t      *testing.T
	schema string
	name   string
	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	out    *pgtest.SyncBuffer
}

func (p *workerProc) start() {
	p.t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestApprovalWorkerProcess$")
	pgtest.DieWithTest(cmd)
	cmd.Env = append(os.Environ(), "APPROVAL_WORKER_SCHEMA="+p.schema, "APPROVAL_WORKER_NAME="+p.name,
		"DATABASE_URL="+pgtest.URLWithPoolMax(6))
	cmd.Stdout, cmd.Stderr = p.out, p.out
	require.NoError(p.t, cmd.Start())
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	p.mu.Lock()
	p.cmd, p.exited = cmd, exited
	p.mu.Unlock()
}

func (p *workerProc) kill() {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-exited
}

// runApprovalChaos starts n demo.approval workflows for three worker
// processes, signals each "approve" at a random moment of the run (some
// before their task waits, most after) while the first process is
// SIGKILLed (and restarted) kills times, and checks that every workflow
// completed approved and that each step's side effect happened once.
func runApprovalChaos(t *testing.T, n, kills int, spread, timeout time.Duration) {
	t.Helper()
	db := pgtest.New(t)
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, db.Q(createEffectSQL))
	require.NoError(t, err)
	qc := db.Client(t)
	wfc := workflow.NewClient(qc)
	reg := workflow.NewRegistry()
	// The builders only, to start the workflows from here.
	require.NoError(t, reg.Register("demo.approval", func(wf *workflow.Workflow, input json.RawMessage) error {
		wf.Add("approval", demoworkflows.ApprovalArgs{TimeoutMS: (30 * time.Minute).Milliseconds()}, nil)
		return nil
	}))
	ids := make([]string, n)
	for i := range ids {
		res, err := wfc.Start(ctx, reg, "demo.approval", json.RawMessage(`{"timeout":"30m"}`), nil)
		require.NoError(t, err)
		ids[i] = res.ID
	}

	procs := make([]*workerProc, 3)
	for i := range procs {
		procs[i] = &workerProc{t: t, schema: db.Schema, name: fmt.Sprint("p", i), out: &pgtest.SyncBuffer{}}
		procs[i].start()
	}
	t.Cleanup(func() {
		for _, p := range procs {
			p.kill()
			if t.Failed() {
				t.Logf("process %s output (tail):\n%s", p.name, tail(p.out.String(), 3000))
			}
		}
	})

	start := time.Now()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // the signaller
		defer wg.Done()
		order := rand.Perm(n)
		for k, i := range order {
			at := start.Add(time.Duration(float64(spread) * float64(k) / float64(n)))
			time.Sleep(time.Until(at))
			if _, err := wfc.Signal(ctx, ids[i], "approve", map[string]int{"k": k}, &workflow.SignalOpts{IdempotencyKey: "approve"}); err != nil {
				t.Errorf("signalling %s: %v", ids[i], err)
			}
		}
	}()
	wg.Add(1)
	go func() { // the killer
		defer wg.Done()
		for k := range kills {
			time.Sleep(time.Until(start.Add(time.Duration(float64(spread) * float64(k+1) / float64(kills+1)))))
			procs[0].kill()
			t.Logf("chaos: SIGKILLed %s (%d of %d) at %s", procs[0].name, k+1, kills, time.Since(start).Round(time.Millisecond))
			procs[0].start()
		}
	}()
	wg.Wait()

	pgtest.WaitFor(t, timeout, fmt.Sprintf("all %d workflows to complete", n), func() (bool, error) {
		var done int
		err := db.Pool.QueryRow(ctx, db.Q(`SELECT count(*) FROM /*schema*/tributary_workflow WHERE status = 'completed'`)).Scan(&done)
		return done == n, err
	})
	t.Logf("chaos: %d workflows completed %s after the start", n, time.Since(start).Round(time.Millisecond))
	for _, id := range ids {
		d, err := wfc.Get(ctx, id)
		require.NoError(t, err)
		var out demoworkflows.ApprovalOutput
		require.NoError(t, json.Unmarshal(d.Tasks[0].Output, &out))
		require.True(t, out.Approved, "workflow %s was approved, not timed out", id)
	}
	var total, dup int
	require.NoError(t, db.Pool.QueryRow(ctx, db.Q(`SELECT count(*) FROM /*schema*/approval_effect`)).Scan(&total))
	require.NoError(t, db.Pool.QueryRow(ctx, db.Q(`SELECT count(*) FROM (SELECT 1 FROM /*schema*/approval_effect GROUP BY workflow_id, step HAVING count(*) > 1) d`)).Scan(&dup))
	require.Zero(t, dup, "no step's side effect happened twice")
	require.Equal(t, 2*n, total, "each workflow's two steps had their side effect")
	var signals int
	require.NoError(t, db.Pool.QueryRow(ctx, db.Q(`SELECT count(*) FROM /*schema*/tributary_workflow_signal WHERE consumed_at IS NOT NULL`)).Scan(&signals))
	require.Equal(t, n, signals, "every signal consumed once")
	t.Logf("chaos: %d step side effects, none twice; %d signals consumed", total, signals)
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// TestApprovalKill is the short run of the approval chaos test: 30
// workflows, one SIGKILL.
func TestApprovalKill(t *testing.T) {
	t.Parallel()
	runApprovalChaos(t, 30, 1, 4*time.Second, 2*time.Minute)
}
