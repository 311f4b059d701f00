package main

import (
	"bytes"
	"context"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/cmd/tributary/internal/demojobs"
	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/queue"
)

// startWorker starts `tributary worker` as a real process on the test's
// schema.
func startWorker(t *testing.T, db *pgtest.DB, env ...string) (*exec.Cmd, *pgtest.SyncBuffer) {
	t.Helper()
	cmd := exec.Command(binPath, "worker", "--queues", "default=20,events=20")
	pgtest.DieWithTest(cmd)
	cmd.Env = baseEnv(db, env)
	logs := &pgtest.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	return cmd, logs
}

// stopWorker sends SIGTERM and returns how long the process took to exit
// and its exit code.
func stopWorker(t *testing.T, cmd *exec.Cmd, limit time.Duration) (time.Duration, int) {
	t.Helper()
	start := time.Now()
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		code := 0
		if exitErr, ok := err.(*exec.ExitError); ok {
			code = exitErr.ExitCode()
		}
		return time.Since(start), code
	case <-time.After(limit):
		_ = cmd.Process.Kill()
		<-done // Wait has returned; the cleanup does not wait again
		t.Fatalf("worker did not exit within %s of SIGTERM", limit)
		return 0, -1
	}
}

func TestWorkerShutdownAndRestart(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	client := db.Client(t)
	ctx := context.Background()

	const shutdownTimeout = 2 * time.Second
	// Short jobs finish inside the shutdown timeout; long ones do not and are
	// cancelled, to run again after the restart.
	var items []queue.EnqueueItem
	for range 3 {
		items = append(items, queue.EnqueueItem{Args: demojobs.SleepArgs{MS: 1200}})
	}
	for range 4 {
		items = append(items, queue.EnqueueItem{Args: demojobs.SleepArgs{MS: 4000}})
	}
	_, err := client.EnqueueMany(ctx, items)
	require.NoError(t, err)

	worker, logs := startWorker(t, db, "TRIBUTARY_SHUTDOWN_TIMEOUT="+shutdownTimeout.String())
	pgtest.WaitFor(t, 30*time.Second, "all seven jobs running", func() (bool, error) {
		return db.CountJobs(t, rivertype.JobStateRunning) == len(items), nil
	})

	took, code := stopWorker(t, worker, shutdownTimeout+queue.HardStopGraceDefault+10*time.Second)
	require.Equal(t, 0, code, "worker logs:\n%s", logs.String())
	require.Less(t, took, shutdownTimeout+queue.HardStopGraceDefault, "worker logs:\n%s", logs.String())

	// The short jobs finished during the soft stop; the long ones were
	// interrupted and are waiting to run again. None is stuck as running.
	require.Equal(t, 3, db.CountJobs(t, rivertype.JobStateCompleted))
	require.Equal(t, 0, db.CountJobs(t, rivertype.JobStateRunning), "worker logs:\n%s", logs.String())
	require.Equal(t, 4, db.CountJobs(t, rivertype.JobStateAvailable, rivertype.JobStateScheduled, rivertype.JobStateRetryable))

	worker, logs = startWorker(t, db)
	pgtest.WaitFor(t, 60*time.Second, "every job completed after the restart", func() (bool, error) {
		return db.CountJobs(t, rivertype.JobStateCompleted) == len(items), nil
	})
	require.Equal(t, len(items), db.CountJobs(t))
	_, code = stopWorker(t, worker, 40*time.Second)
	require.Equal(t, 0, code, "worker logs:\n%s", logs.String())
}

func TestWorkerSecondSignalCancelsAtOnce(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	client := db.Client(t)
	ctx := context.Background()

	res, err := client.Enqueue(ctx, demojobs.SleepArgs{MS: 60_000}, nil)
	require.NoError(t, err)
	worker, logs := startWorker(t, db, "TRIBUTARY_SHUTDOWN_TIMEOUT=2m")
	db.WaitForJobState(t, res.Job.ID, rivertype.JobStateRunning, 30*time.Second)

	require.NoError(t, worker.Process.Signal(syscall.SIGTERM))
	pgtest.WaitFor(t, 10*time.Second, "the worker to log its shutdown", func() (bool, error) {
		return bytes.Contains([]byte(logs.String()), []byte("shutting down")), nil
	})
	took, code := stopWorker(t, worker, 30*time.Second)
	require.Equal(t, 0, code, "worker logs:\n%s", logs.String())
	require.Less(t, took, queue.HardStopGraceDefault+5*time.Second, "the second signal skips the 2m soft stop")

	// The interrupted job is available again, with no failed attempt recorded.
	state, err := db.JobState(ctx, res.Job.ID)
	require.NoError(t, err)
	require.Equal(t, rivertype.JobStateAvailable, state, "worker logs:\n%s", logs.String())
	job, err := client.River().JobGet(ctx, res.Job.ID)
	require.NoError(t, err)
	require.Empty(t, job.Errors)
}

// TestWorkerConfigErrorsBeforeStart checks that settings the worker cannot
// use stop it with exit 2 and one sentence naming them, before it connects
// to anything. Each case runs twice: against a closed port, where any later
// failure would be a connection error with exit 1, and against a migrated
// schema, where a worker that started anything would log more than the one
// line on stderr.
func TestWorkerConfigErrorsBeforeStart(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	unreachable := "DATABASE_URL=postgres://postgres@127.0.0.1:1/db?sslmode=disable&connect_timeout=2"
	cases := []struct {
		name     string
		env      []string
		args     []string
		mentions []string
	}{
		{"RescueStuckBelowJobTimeout", []string{"TRIBUTARY_RESCUE_STUCK_AFTER=15s"}, nil, []string{"TRIBUTARY_RESCUE_STUCK_AFTER", `"15s"`, "job timeout"}},
		{"LivenessTimeoutTooShort", []string{"TRIBUTARY_LIVENESS_TIMEOUT=100ms"}, nil, []string{"TRIBUTARY_LIVENESS_TIMEOUT", `"100ms"`, "at least 1s"}},
		{"FetchPollBelowCooldown", []string{"TRIBUTARY_FETCH_COOLDOWN=50ms", "TRIBUTARY_FETCH_POLL_INTERVAL=20ms"}, nil, []string{"TRIBUTARY_FETCH_POLL_INTERVAL", `"20ms"`, "fetch cooldown"}},
		{"HTTPTooManyColons", nil, []string{"--http", "nope:nope:nope"}, []string{"--http", `"nope:nope:nope"`}},
		{"HTTPPortNotANumber", nil, []string{"--http", "127.0.0.1:nope"}, []string{"--http", `"127.0.0.1:nope"`}},
		{"HTTPNoPort", nil, []string{"--http", "localhost"}, []string{"--http", `"localhost"`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			args := append([]string{"worker"}, tc.args...)
			for _, res := range []cliResult{
				cli(t, nil, append([]string{unreachable}, tc.env...), args...),
				cli(t, db, tc.env, args...),
			} {
				require.Equal(t, exitUsage, res.code, "stderr: %s", res.stderr)
				oneSentence(t, res.stderr)
				for _, m := range tc.mentions {
					require.Contains(t, res.stderr, m)
				}
				require.Empty(t, res.stdout)
			}
		})
	}
}

// TestDashboardAddrErrorsBeforeStart: `tributary dashboard --addr` refuses
// an address that cannot be listened on with exit 2 naming it, as the
// worker's --http does, before it connects to anything.
func TestDashboardAddrErrorsBeforeStart(t *testing.T) {
	t.Parallel()
	unreachable := "DATABASE_URL=postgres://postgres@127.0.0.1:1/db?sslmode=disable&connect_timeout=2"
	for _, addr := range []string{"nope:nope:nope", "127.0.0.1:nope", "localhost"} {
		res := cli(t, nil, []string{unreachable}, "dashboard", "--addr", addr)
		require.Equal(t, exitUsage, res.code, "stderr: %s", res.stderr)
		oneSentence(t, res.stderr)
		require.Contains(t, res.stderr, "--addr")
		require.Contains(t, res.stderr, `"`+addr+`"`)
	}
}
