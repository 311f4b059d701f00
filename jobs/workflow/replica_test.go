package workflow_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/jobs/workflow"
	"github.com/tributary-run/tributary/jobs/workflow/internal/wfreplica"
)

// TestReplicaProcesses is the short run of the three-process test: 60
// diamond workflows on three worker processes, one of them SIGKILLed once
// while tasks run. `make chaos` runs the long one (replica_chaos_test.go).
func TestReplicaProcesses(t *testing.T) {
	t.Parallel()
	runReplicas(t, 60, 1, 5*time.Minute)
}

// replicaProc is one worker process of the replica test.
type replicaProc struct {
	t      *testing.T
	bin    string
	db     *pgtest.DB
	name   string
	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	stderr *pgtest.SyncBuffer
}

func (p *replicaProc) start() {
	p.t.Helper()
	cmd := exec.Command(p.bin)
	pgtest.DieWithTest(cmd)
	cmd.Env = append(os.Environ(),
		"DATABASE_URL="+pgtest.URLWithPoolMax(5),
		"TRIBUTARY_SCHEMA="+p.db.Schema,
		"REPLICA_NAME="+p.name,
		"REPLICA_FAIL_RATE=0.05",
		"REPLICA_MAX_LATENCY=20ms",
	)
	cmd.Stderr = p.stderr
	require.NoError(p.t, cmd.Start())
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	p.mu.Lock()
	p.cmd, p.exited = cmd, exited
	p.mu.Unlock()
}

func (p *replicaProc) signal(sig syscall.Signal) {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	_ = cmd.Process.Signal(sig)
	<-exited
}

// runReplicas inserts n diamond workflows for three worker processes,
// SIGKILLs (and restarts) the first process kills times while tasks run,
// and checks that every workflow completed, that no task started before
// each of its dependencies completed (from the start log and the recorded
// finish times), and that each task's output was written once and is the
// one its dependents read.
func runReplicas(t *testing.T, n, kills int, timeout time.Duration) {
	t.Helper()
	db := pgtest.New(t)
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, db.Q(wfreplica.CreateLogSQL))
	require.NoError(t, err)

	bin := filepath.Join(t.TempDir(), "replicaworker")
	out, err := exec.Command("go", "build", "-o", bin, "./internal/testproc/replicaworker").CombinedOutput()
	require.NoError(t, err, "building the worker: %s", out)
	procs := make([]*replicaProc, 3)
	for i := range procs {
		procs[i] = &replicaProc{t: t, bin: bin, db: db, name: fmt.Sprint("p", i), stderr: &pgtest.SyncBuffer{}}
		procs[i].start()
	}
	t.Cleanup(func() {
		for _, p := range procs {
			p.signal(syscall.SIGTERM)
			if t.Failed() {
				t.Logf("process %s stderr:\n%s", p.name, p.stderr.String())
			}
		}
	})

	client := workflow.NewClient(db.Client(t))
	begin := time.Now()
	// The workflows go in in kills+1 parts: one before the first kill and
	// one before each later kill, so every kill lands while tasks run
	// however fast the machine works a part (all at once, a quiet machine
	// finished the 1,000 before the second kill, and the test then waited
	// for tasks that would never start).
	parts := kills + 1
	insertPart := func(part int) {
		t.Helper()
		from, to := part*n/parts, (part+1)*n/parts
		var g errgroup.Group
		for w := range 4 {
			g.Go(func() error {
				for i := from + w; i < to; i += 4 {
					if _, err := client.Insert(ctx, wfreplica.Diamond(i)); err != nil {
						return err
					}
				}
				return nil
			})
		}
		require.NoError(t, g.Wait())
	}

	completed := func() (int, error) {
		var c int
		err := db.Pool.QueryRow(ctx, db.Q(`SELECT count(*) FROM /*schema*/tributary_workflow WHERE status = 'completed'`)).Scan(&c)
		return c, err
	}
	startedSince := time.Now()
	for k := range kills {
		// Kill while tasks run on it: once the process has started tasks
		// since it was last (re)started, among the part just inserted.
		insertPart(k)
		pgtest.WaitFor(t, timeout, fmt.Sprintf("process %s to start tasks before kill %d", procs[0].name, k+1), func() (bool, error) {
			var mine int
			err := db.Pool.QueryRow(ctx, db.Q(`SELECT count(*) FROM /*schema*/replica_start WHERE replica = $1 AND started_at > $2`), procs[0].name, startedSince).Scan(&mine)
			return mine >= 10, err
		})
		var running int
		require.NoError(t, db.Pool.QueryRow(ctx, db.Q(`SELECT count(*) FROM /*schema*/river_job WHERE state = 'running'`)).Scan(&running))
		procs[0].signal(syscall.SIGKILL)
		t.Logf("kill %d: SIGKILLed %s at %s with %d jobs running overall", k+1, procs[0].name, time.Since(begin).Round(time.Millisecond), running)
		startedSince = time.Now()
		procs[0].start()
	}
	insertPart(kills)
	pgtest.WaitFor(t, timeout, fmt.Sprintf("all %d workflows to complete", n), func() (bool, error) {
		c, err := completed()
		return c == n, err
	})
	took := time.Since(begin)

	var notDone int
	require.NoError(t, db.Pool.QueryRow(ctx, db.Q(`SELECT count(*) FROM /*schema*/tributary_workflow
        WHERE status <> 'completed' OR tasks_completed <> 5 OR tasks_pending + tasks_active + tasks_failed + tasks_cancelled + tasks_skipped <> 0`)).Scan(&notDone))
	require.Zero(t, notDone, "every workflow completed with five completed tasks")

	// No attempt of a task started before each dependency's completion was
	// recorded (finished_at is taken inside the completing transaction,
	// before its commit, so a task released by that commit starts later).
	rows, err := db.Pool.Query(ctx, db.Q(`SELECT s.workflow_id::text, s.task, s.attempt, s.started_at, d.name, d.finished_at
        FROM /*schema*/replica_start s
        JOIN /*schema*/tributary_workflow_task t ON t.workflow_id = s.workflow_id AND t.name = s.task
        JOIN /*schema*/tributary_workflow_task d ON d.workflow_id = t.workflow_id AND d.name = ANY(t.deps)
        WHERE d.finished_at IS NULL OR s.started_at <= d.finished_at
        LIMIT 10`))
	require.NoError(t, err)
	var early []string
	for rows.Next() {
		var wf, task, dep string
		var attempt int
		var started time.Time
		var depFinished *time.Time
		require.NoError(t, rows.Scan(&wf, &task, &attempt, &started, &dep, &depFinished))
		early = append(early, fmt.Sprintf("%s/%s attempt %d started %s, dependency %s finished %v", wf, task, attempt, started, dep, depFinished))
	}
	require.NoError(t, rows.Err())
	require.Empty(t, early, "tasks that started before a dependency completed")

	// Each task's output written once, and it is what the dependents read.
	var writes, tasksWritten, badWrites int
	require.NoError(t, db.Pool.QueryRow(ctx, db.Q(`SELECT count(*), count(DISTINCT (workflow_id, task)),
        (SELECT count(*) FROM (SELECT 1 FROM /*schema*/replica_output_write GROUP BY workflow_id, task HAVING count(*) <> 1) x)
        FROM /*schema*/replica_output_write`)).Scan(&writes, &tasksWritten, &badWrites))
	require.Equal(t, 5*n, tasksWritten, "every task's output was written")
	require.Zero(t, badWrites, "no output was written twice")
	require.Equal(t, 5*n, writes)
	var mismatched int
	require.NoError(t, db.Pool.QueryRow(ctx, db.Q(`SELECT count(*)
        FROM /*schema*/tributary_workflow_task t
        JOIN /*schema*/tributary_workflow_task d ON d.workflow_id = t.workflow_id AND d.name = ANY(t.deps)
        WHERE (t.output -> 'read' ->> d.name) IS DISTINCT FROM (d.output ->> 'nonce')`)).Scan(&mismatched))
	require.Zero(t, mismatched, "every task read its dependencies' recorded outputs")

	var starts, rerun, rescued, replicas int
	require.NoError(t, db.Pool.QueryRow(ctx, db.Q(`SELECT count(*), count(DISTINCT replica) FROM /*schema*/replica_start`)).Scan(&starts, &replicas))
	require.NoError(t, db.Pool.QueryRow(ctx, db.Q(`SELECT count(*) FROM (SELECT 1 FROM /*schema*/replica_start GROUP BY workflow_id, task HAVING count(*) > 1) x`)).Scan(&rerun))
	// River's rescuer and tributary's liveness sweep both count a rescue in
	// the job's metadata.
	require.NoError(t, db.Pool.QueryRow(ctx, db.Q(`SELECT coalesce(sum((metadata ->> 'river:rescue_count')::int), 0)
        FROM /*schema*/river_job WHERE metadata ? 'river:rescue_count'`)).Scan(&rescued))
	t.Logf("%d workflows (%d tasks) on 3 processes, %d SIGKILLs: %s; %d task starts, %d tasks ran more than once, %d attempts rescued after a kill, %d processes worked",
		n, 5*n, kills, took.Round(time.Millisecond), starts, rerun, rescued, replicas)
	require.GreaterOrEqual(t, replicas, 2, "several processes worked tasks")
}
