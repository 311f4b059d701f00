package workflow_test

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/jobs/workflow"
	"github.com/tributary-run/tributary/jobs/workflow/internal/wfreplica"
	"github.com/tributary-run/tributary/queue"
)

// queryCounter counts the queries run under a context it marked.
type queryCounter struct{}

type countKey struct{}

func (queryCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	if n, ok := ctx.Value(countKey{}).(*atomic.Int64); ok {
		n.Add(1)
	}
	return ctx
}

func (queryCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// countingClient returns a workflow client on a pool of its own whose
// queries are counted under contexts made by counted.
func countingClient(t *testing.T, db *pgtest.DB) *workflow.Client {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(db.URL)
	require.NoError(t, err)
	cfg.MaxConns = 8
	cfg.ConnConfig.Tracer = queryCounter{}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	qc, err := queue.NewClient(pool, queue.ClientConfig{Schema: db.Schema, Logger: pgtest.Logger(t)})
	require.NoError(t, err)
	return workflow.NewClient(qc)
}

func counted(ctx context.Context) (context.Context, *atomic.Int64) {
	n := &atomic.Int64{}
	return context.WithValue(ctx, countKey{}, n), n
}

// chain is a -> b, b reading a.
func chain(name string) *workflow.Workflow {
	wf := workflow.New(name, nil)
	wf.Add("a", stepArgs{Name: "a"}, nil)
	wf.Add("b", stepArgs{Name: "b", Read: []string{"a"}}, &workflow.TaskOpts{Deps: []string{"a"}})
	return wf
}

func TestAwait(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("ResultOfFinalTasks", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		res, err := b.client.Insert(ctx, diamond("await", &workflow.Opts{ID: "await-1"}))
		require.NoError(t, err)
		o, err := b.client.Await(ctx, "await-1") // by key
		require.NoError(t, err)
		require.Equal(t, workflow.StatusCompleted, o.Status)
		require.Equal(t, res.ID, o.ID)
		require.Len(t, o.Final, 1, "d is the only task nothing depends on")
		require.Equal(t, "d", o.Final[0].Name)
		out, err := workflow.AwaitResult[stepOutput](ctx, b.client, res.ID, "d")
		require.NoError(t, err, "an ended workflow returns at once")
		require.Equal(t, "d", out.Task)
		require.ElementsMatch(t, []string{"b", "c"}, slices.Collect(maps.Keys(out.Read)))
		_, err = workflow.AwaitResult[stepOutput](ctx, b.client, res.ID, "a")
		require.ErrorContains(t, err, `task "a" is not a final task`)
	})

	t.Run("FailedIsOutcomeError", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		wf := workflow.New("await-fail", nil)
		wf.Add("a", stepArgs{Name: "a", Cancel: true}, nil)
		wf.Add("b", stepArgs{Name: "b"}, &workflow.TaskOpts{Deps: []string{"a"}})
		res, err := b.client.Insert(ctx, wf)
		require.NoError(t, err)
		_, err = workflow.AwaitResult[stepOutput](ctx, b.client, res.ID, "b")
		var oe *workflow.OutcomeError
		require.ErrorAs(t, err, &oe)
		require.ErrorIs(t, err, workflow.ErrNotCompleted)
		require.Equal(t, workflow.StatusFailed, oe.Outcome.Status)
		require.Contains(t, oe.Outcome.Failed["a"], "step a gives up")
		require.Equal(t, workflow.TaskCancelled, oe.Outcome.Final[0].State)
	})

	t.Run("OperatorCancelWakes", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		wf := workflow.New("await-cancel", nil)
		wf.Add("a", stepArgs{Name: "a"}, &workflow.TaskOpts{InsertOpts: idleQueue()})
		res, err := b.client.Insert(ctx, wf)
		require.NoError(t, err)
		done := make(chan *workflow.Outcome, 1)
		go func() {
			o, err := b.client.Await(ctx, res.ID)
			if err != nil {
				t.Error(err)
			}
			done <- o
		}()
		waitAwaited(t, b.db, res.ID)
		_, err = b.client.Cancel(ctx, res.ID)
		require.NoError(t, err)
		select {
		case o := <-done:
			require.Equal(t, workflow.StatusCancelled, o.Status)
		case <-time.After(workflow.AwaitRecheckInterval - time.Second):
			t.Fatal("Await was not woken by the cancel's notification")
		}
	})

	t.Run("TimeoutAndCancel", func(t *testing.T) {
		t.Parallel()
		db := pgtest.New(t)
		client := workflow.NewClient(db.Client(t))
		wf := workflow.New("await-never", nil)
		wf.Add("a", stepArgs{Name: "a"}, &workflow.TaskOpts{InsertOpts: idleQueue()})
		res, err := client.Insert(ctx, wf)
		require.NoError(t, err)

		tctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		_, err = client.Await(tctx, res.ID)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.ErrorContains(t, err, "awaiting workflow "+res.ID)

		cctx, cancel2 := context.WithCancel(ctx)
		time.AfterFunc(100*time.Millisecond, cancel2)
		_, err = client.Await(cctx, res.ID)
		require.ErrorIs(t, err, context.Canceled)
		require.ErrorContains(t, err, res.ID)

		_, err = client.Await(ctx, "no-such-key")
		require.ErrorIs(t, err, workflow.ErrNotFound)
	})

	t.Run("ReconnectRereads", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		proxy, viaProxy := pgtest.ThroughCutProxy(t, b.db)
		qc, err := queue.NewClient(viaProxy.Pool, queue.ClientConfig{Schema: b.db.Schema, Logger: pgtest.Logger(t)})
		require.NoError(t, err)
		client := workflow.NewClient(qc)
		wf := workflow.New("await-cut", nil)
		wf.Add("a", stepArgs{Name: "a", Wait: true}, nil)
		res, err := b.client.Insert(ctx, wf)
		require.NoError(t, err)
		done := make(chan error, 1)
		go func() {
			o, err := client.Await(ctx, res.ID)
			if err == nil && o.Status != workflow.StatusCompleted {
				err = fmt.Errorf("status %s", o.Status)
			}
			done <- err
		}()
		waitAwaited(t, b.db, res.ID)
		proxy.Cut() // the listener's connection dies; the end is not heard
		b.worker.Release("a")
		b.waitStatus(t, res.ID, workflow.StatusCompleted)
		proxy.Restore()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(30 * time.Second):
			t.Fatal("Await did not return after the connection came back")
		}
	})
}

// waitAwaited waits until a waiter has flagged workflow id.
func waitAwaited(t *testing.T, db *pgtest.DB, id string) {
	t.Helper()
	pgtest.WaitFor(t, 10*time.Second, "the wait to register", func() (bool, error) {
		var awaited bool
		err := db.Pool.QueryRow(context.Background(), db.Q(`SELECT awaited FROM /*schema*/tributary_workflow WHERE id = $1`), id).Scan(&awaited)
		return awaited, err
	})
}

// TestAwaitLatency is the HTTP handler's use: insert a workflow, wait for
// its result. It prints the p50/p99 delay from the commit that ended the
// workflow (its finished_at, taken in that transaction) to Await's return
// over 200 runs, and fails if a wait ran more than a few queries: Await is
// woken by the notification, it does not poll.
func TestAwaitLatency(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	client := countingClient(t, b.db)
	const runs, callers, maxQueries = 200, 4, 4
	var mu sync.Mutex
	var delays, totals []time.Duration
	var queries []int64
	errs := make(chan error, callers)
	for c := range callers {
		go func() {
			for i := c; i < runs; i += callers {
				res, err := client.Insert(ctx, chain(fmt.Sprint("latency-", i)))
				if err != nil {
					errs <- err
					return
				}
				start := time.Now()
				cctx, n := counted(ctx)
				o, err := client.Await(cctx, res.ID)
				returned := time.Now()
				if err != nil {
					errs <- err
					return
				}
				if o.Status != workflow.StatusCompleted {
					errs <- fmt.Errorf("workflow %s ended %s", o.ID, o.Status)
					return
				}
				mu.Lock()
				delays = append(delays, returned.Sub(o.FinishedAt))
				totals = append(totals, returned.Sub(start))
				queries = append(queries, n.Load())
				mu.Unlock()
			}
			errs <- nil
		}()
	}
	for range callers {
		require.NoError(t, <-errs)
	}
	slices.Sort(delays)
	slices.Sort(totals)
	slices.Sort(queries)
	pct := func(d []time.Duration, p float64) time.Duration { return d[int(p*float64(len(d)-1))] }
	t.Logf("Await over %d runs (%d concurrent callers, two-task chain): from the ending commit to the return p50 %s p99 %s max %s; whole wait p50 %s p99 %s; queries per wait min %d max %d",
		len(delays), callers, pct(delays, 0.5), pct(delays, 0.99), delays[len(delays)-1], pct(totals, 0.5), pct(totals, 0.99), queries[0], queries[len(queries)-1])
	require.LessOrEqual(t, queries[len(queries)-1], int64(maxQueries), "a wait ran more than %d queries: it polls", maxQueries)
}

// TestAwaitWorkerKilled waits for a workflow whose worker process is
// SIGKILLed while a task runs: another process rescues the task and the
// wait ends in the result.
func TestAwaitWorkerKilled(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	_, err := db.Pool.Exec(ctx, db.Q(wfreplica.CreateLogSQL))
	require.NoError(t, err)
	bin := filepath.Join(t.TempDir(), "replicaworker")
	out, err := exec.Command("go", "build", "-o", bin, "./internal/testproc/replicaworker").CombinedOutput()
	require.NoError(t, err, "building the worker: %s", out)
	start := func(name string) (*exec.Cmd, *pgtest.SyncBuffer) {
		cmd := exec.Command(bin)
		pgtest.DieWithTest(cmd)
		stderr := &pgtest.SyncBuffer{}
		cmd.Env = append(os.Environ(), "DATABASE_URL="+pgtest.URLWithPoolMax(5), "TRIBUTARY_SCHEMA="+db.Schema,
			"REPLICA_NAME="+name, "REPLICA_MAX_LATENCY=3s")
		cmd.Stderr = stderr
		require.NoError(t, cmd.Start())
		return cmd, stderr
	}
	first, _ := start("first")
	firstExited := make(chan struct{})
	go func() { _ = first.Wait(); close(firstExited) }()

	client := workflow.NewClient(db.Client(t))
	res, err := client.Insert(ctx, wfreplica.Diamond(1))
	require.NoError(t, err)
	type result struct {
		o   *workflow.Outcome
		err error
	}
	done := make(chan result, 1)
	go func() {
		actx, cancel := context.WithTimeout(ctx, 3*time.Minute)
		defer cancel()
		o, err := client.Await(actx, res.ID)
		done <- result{o, err}
	}()
	pgtest.WaitFor(t, time.Minute, "a task to start on the first process", func() (bool, error) {
		var n int
		err := db.Pool.QueryRow(ctx, db.Q(`SELECT count(*) FROM /*schema*/replica_start WHERE replica = 'first'`)).Scan(&n)
		return n > 0, err
	})
	require.NoError(t, first.Process.Signal(syscall.SIGKILL))
	<-firstExited
	second, stderr := start("second")
	t.Cleanup(func() {
		_ = second.Process.Signal(syscall.SIGTERM)
		_ = second.Wait()
		if t.Failed() {
			t.Logf("second process stderr:\n%s", stderr.String())
		}
	})
	r := <-done
	require.NoError(t, r.err)
	require.Equal(t, workflow.StatusCompleted, r.o.Status)
	var sink wfreplica.Output
	require.NoError(t, r.o.Output("sink", &sink))
	require.Len(t, sink.Read, len(wfreplica.Middle))
	var rerun int
	require.NoError(t, db.Pool.QueryRow(ctx, db.Q(`SELECT count(*) FROM /*schema*/replica_start WHERE replica = 'second'`)).Scan(&rerun))
	t.Logf("workflow %s completed after the SIGKILL; %d task starts on the second process", res.ID, rerun)
}
