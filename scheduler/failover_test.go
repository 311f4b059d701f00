package scheduler

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/queue"
)

// TestMain doubles as the test worker process: started with
// SCHEDPROC_MAIN=1, the test binary runs schedProcMain instead of the tests,
// so the failover tests need no separate build.
func TestMain(m *testing.M) {
	if os.Getenv("SCHEDPROC_MAIN") == "1" {
		os.Exit(schedProcMain())
	}
	os.Exit(m.Run())
}

// schedProcMain is a minimal worker process: a runtime with one @every 1s
// schedule "tick" (catch-up each, so a late replica inserts every fire
// time) and a no-op worker for its kind. It prints "ready" once started and
// stops on SIGINT/SIGTERM; tests kill it with SIGKILL to simulate a crash.
// With SCHEDPROC_HANG=1 it blocks inside its first fire's transaction,
// after inserting the job and before committing, and prints
// "hanging FIRE_TIME".
func schedProcMain() int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	fail := func(err error) int {
		fmt.Fprintln(os.Stderr, "schedproc:", err)
		return 1
	}
	cfg, err := pgxpool.ParseConfig(os.Getenv("DATABASE_URL"))
	if err != nil {
		return fail(err)
	}
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return fail(err)
	}
	defer pool.Close()
	rt, err := queue.NewRuntime(pool, queue.RuntimeConfig{
		Schema:          os.Getenv("TRIBUTARY_SCHEMA"),
		Logger:          logger,
		Queues:          map[string]int{"default": 2},
		ShutdownTimeout: 2 * time.Second,
	})
	if err != nil {
		return fail(err)
	}
	queue.AddWorker(rt, &noopWorker{})
	scfg := Config{ID: os.Getenv("SCHEDPROC_ID")}
	if os.Getenv("SCHEDPROC_HANG") == "1" {
		scfg.Test.BeforeCommitFunc = func(ctx context.Context, _ string, fireTimes []time.Time) {
			if len(fireTimes) == 0 {
				return
			}
			fmt.Println("hanging", fireTimes[len(fireTimes)-1].UTC().Format(time.RFC3339Nano))
			<-ctx.Done() // until killed (or stopped)
		}
	}
	s := New(rt.Client, scfg)
	if err := s.Add(Schedule{Name: "tick", Spec: "@every 1s", Args: noopArgs{}, CatchUp: CatchUpEach, CatchUpMax: 100}); err != nil {
		return fail(err)
	}
	if err := rt.AddService(s); err != nil {
		return fail(err)
	}
	if err := rt.Start(ctx); err != nil {
		return fail(err)
	}
	fmt.Println("ready")
	<-ctx.Done()
	stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := rt.Stop(stopCtx); err != nil {
		return fail(err)
	}
	return 0
}

// proc is a running test worker process.
type proc struct {
	id    string
	cmd   *exec.Cmd
	lines *bufio.Reader
}

// startSchedProc starts a test worker on db's schema and waits for it to
// say it is ready. env adds variables.
func startSchedProc(t *testing.T, db *pgtest.DB, id string, env ...string) *proc {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	pgtest.DieWithTest(cmd)
	cmd.Env = append(os.Environ(), "SCHEDPROC_MAIN=1", "DATABASE_URL="+db.URL, "TRIBUTARY_SCHEMA="+db.Schema, "SCHEDPROC_ID="+id)
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	if testing.Verbose() {
		cmd.Stderr = os.Stderr
	}
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	p := &proc{id: id, cmd: cmd, lines: bufio.NewReader(out)}
	line, err := p.lines.ReadString('\n')
	require.NoError(t, err, "process %s did not start", id)
	require.Equal(t, "ready", strings.TrimSpace(line))
	return p
}

// TestFailoverSIGKILL runs two real worker processes on one @every 1s
// schedule for 30 seconds and SIGKILLs the one that fired last, midway. The
// fire times must form a gapless one-second chain with no duplicates, and
// their number must be the expected count ±1.
//
// The unique index on (schedule, fire time) is dropped first, so what is
// shown is the row-lock protocol itself, not the index catching it.
func TestFailoverSIGKILL(t *testing.T) {
	t.Parallel()

	db := pgtest.New(t)
	_, err := db.Pool.Exec(context.Background(), db.Q(`DROP INDEX /*schema*/river_job_tributary_schedule_fire`))
	require.NoError(t, err)

	startProc := func(id string) *proc { return startSchedProc(t, db, id) }
	procs := map[string]*proc{"A": startProc("A"), "B": startProc("B")}
	started := time.Now()

	// Midway: kill whichever process inserted the latest job.
	pgtest.WaitFor(t, 30*time.Second, "15 fires", func() (bool, error) { return len(firedJobs(t, db, "tick")) >= 15, nil })
	jobs := firedJobs(t, db, "tick")
	victim := procs[jobs[len(jobs)-1].FiredBy]
	require.NotNil(t, victim, "latest job fired by %q", jobs[len(jobs)-1].FiredBy)
	require.NoError(t, victim.cmd.Process.Signal(syscall.SIGKILL))
	killedAt := time.Now()
	_ = victim.cmd.Wait()
	survivor := procs[map[string]string{"A": "B", "B": "A"}[victim.id]]
	t.Logf("killed %s after %s with %d jobs fired", victim.id, killedAt.Sub(started).Round(time.Millisecond), len(jobs))

	// Run on until 30 s in all, then stop the survivor cleanly.
	pgtest.WaitFor(t, 40*time.Second, "30 s of fires", func() (bool, error) {
		jobs := firedJobs(t, db, "tick")
		return len(jobs) > 0 && jobs[len(jobs)-1].FireAt.Sub(jobs[0].FireAt) >= 29*time.Second, nil
	})
	require.NoError(t, survivor.cmd.Process.Signal(syscall.SIGTERM))
	stoppedAt := time.Now()
	require.NoError(t, survivor.cmd.Wait(), "survivor exits 0 on SIGTERM")

	jobs = firedJobs(t, db, "tick")
	first, last := jobs[0].FireAt, jobs[len(jobs)-1].FireAt

	var dups int
	err = db.Pool.QueryRow(context.Background(), db.Q(`
SELECT count(*) FROM (SELECT 1 FROM /*schema*/river_job WHERE metadata->>'tributary_schedule' = 'tick'
GROUP BY metadata->>'tributary_fire_at' HAVING count(*) > 1) d`)).Scan(&dups)
	require.NoError(t, err)
	require.Zero(t, dups, "fire times with more than one job")

	for i := 1; i < len(jobs); i++ {
		require.Equal(t, time.Second, jobs[i].FireAt.Sub(jobs[i-1].FireAt), "gap or duplicate between %s and %s", jobs[i-1].FireAt, jobs[i].FireAt)
	}
	// Every whole second from the first fire to the survivor's stop fired
	// once; ±1 for the fire that may or may not have happened as it stopped.
	expected := int(stoppedAt.Sub(first)/time.Second) + 1
	require.InDelta(t, expected, len(jobs), 1, "fired %d jobs from %s to %s, expected %d", len(jobs), first, last, expected)

	var afterKill int
	for _, j := range jobs {
		if j.FiredBy == survivor.id && j.FireAt.After(killedAt) {
			afterKill++
		}
	}
	require.Positive(t, afterKill, "the survivor took over")
	byProc := map[string]int{}
	for _, j := range jobs {
		byProc[j.FiredBy]++
	}
	t.Logf("%d jobs over %s, expected %d; fired by %v", len(jobs), last.Sub(first), expected, fmt.Sprint(byProc))
}

// TestCrashMidFire SIGKILLs a process while it is inside a fire's
// transaction, after it inserted the job and advanced next_run_at but before
// the commit. Nothing of that fire survives; the other process fires the same
// fire time, once.
func TestCrashMidFire(t *testing.T) {
	t.Parallel()

	db := pgtest.New(t)
	ctx := context.Background()

	hanging := startSchedProc(t, db, "hang", "SCHEDPROC_HANG=1")
	line, err := hanging.lines.ReadString('\n')
	require.NoError(t, err)
	fireAtText, ok := strings.CutPrefix(strings.TrimSpace(line), "hanging ")
	require.True(t, ok, "unexpected line %q", line)
	fireAt, err := time.Parse(time.RFC3339Nano, fireAtText)
	require.NoError(t, err)

	// The job is inserted but not committed: nobody else sees it.
	require.Empty(t, firedJobs(t, db, "tick"))

	survivor := startSchedProc(t, db, "survivor")
	// While the row is locked, the survivor cannot fire this schedule.
	require.Empty(t, firedJobs(t, db, "tick"))

	require.NoError(t, hanging.cmd.Process.Signal(syscall.SIGKILL))
	_ = hanging.cmd.Wait()

	pgtest.WaitFor(t, 20*time.Second, "the survivor to fire past the crash", func() (bool, error) {
		jobs := firedJobs(t, db, "tick")
		return len(jobs) >= 3, nil
	})
	jobs := firedJobs(t, db, "tick")
	require.Equal(t, fireAt, jobs[0].FireAt, "the crashed fire's time is fired again")
	for i, j := range jobs {
		require.Equal(t, "survivor", j.FiredBy, "job %d", j.ID)
		if i > 0 {
			require.Equal(t, time.Second, j.FireAt.Sub(jobs[i-1].FireAt))
		}
	}
	var n int
	require.NoError(t, db.Pool.QueryRow(ctx, db.Q(`SELECT count(*) FROM /*schema*/river_job
WHERE metadata->>'tributary_fire_at' = $1`), formatFireTime(fireAt)).Scan(&n))
	require.Equal(t, 1, n)

	require.NoError(t, survivor.cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, survivor.cmd.Wait())
}
