package main

import (
	"context"
	"io"
	"net/http"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/cmd/tributary/internal/demojobs"
	"github.com/tributary-run/tributary/internal/pgtest"
)

// startDashboardProcess starts the binary with args and waits for the
// dashboard's "dashboard listening" log line; it returns the base URL.
func startDashboardProcess(t *testing.T, db *pgtest.DB, env []string, args ...string) (*exec.Cmd, string) {
	t.Helper()
	cmd, _, base := startServing(t, db, env, args...)
	return cmd, base
}

// startServing is startDashboardProcess that also returns the process's
// output.
func startServing(t *testing.T, db *pgtest.DB, env []string, args ...string) (*exec.Cmd, *pgtest.SyncBuffer, string) {
	t.Helper()
	cmd := exec.Command(binPath, args...)
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
	re := regexp.MustCompile(`msg="dashboard listening" addr=(\S+)`)
	var addr string
	pgtest.WaitFor(t, 30*time.Second, "the dashboard to listen", func() (bool, error) {
		if m := re.FindStringSubmatch(logs.String()); m != nil {
			addr = m[1]
			return true, nil
		}
		if cmd.ProcessState != nil {
			t.Fatalf("tributary exited early:\n%s", logs.String())
		}
		return false, nil
	})
	return cmd, logs, "http://" + addr
}

func dashboardGet(t *testing.T, url string) (int, string) {
	t.Helper()
	res, err := http.Get(url)
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res.StatusCode, string(b)
}

func sigtermAndWait(t *testing.T, cmd *exec.Cmd) int {
	t.Helper()
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("tributary did not exit within 30s of SIGTERM")
	}
	return cmd.ProcessState.ExitCode()
}

func TestCLIDashboard(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	cmd, base := startDashboardProcess(t, db, []string{"TRIBUTARY_DASHBOARD_TOKEN=tok"}, "dashboard", "--addr", "127.0.0.1:0")

	for _, path := range []string{"/healthz", "/readyz", "/api/overview", "/", "/jobs", "/metrics"} {
		code, body := dashboardGet(t, base+path)
		require.Equal(t, http.StatusOK, code, "%s: %s", path, body)
	}
	res, err := http.Post(base+"/api/jobs/1/retry", "text/plain", nil)
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusUnauthorized, res.StatusCode)

	require.Equal(t, 0, sigtermAndWait(t, cmd))

	r := cli(t, db, nil, "dashboard", "--addr", "")
	require.Equal(t, 2, r.code, r.stderr)
	require.Contains(t, r.stderr, "--addr needs an address")
	r = cli(t, db, []string{"AMQP_URL=amqp://guest:guest@127.0.0.1:5672/", "TRIBUTARY_DASHBOARD_AMQP_QUEUES=ok,bad name"}, "dashboard", "--addr", "127.0.0.1:0")
	require.Equal(t, 2, r.code, r.stderr)
	require.Contains(t, r.stderr, `"bad name"`)
}

func TestCLIWorkerServesDashboard(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	cmd, base := startDashboardProcess(t, db, nil, "worker", "--queues", "default=5,events=5", "--http", "127.0.0.1:0")

	ctx := context.Background()
	res, err := db.Client(t).Enqueue(ctx, demojobs.NoopArgs{}, nil)
	require.NoError(t, err)
	pgtest.WaitFor(t, 30*time.Second, "the worker's metrics to count the job", func() (bool, error) {
		_, body := dashboardGet(t, base+"/metrics")
		return strings.Contains(body, `tributary_jobs_worked_total{kind="demo.noop",outcome="completed",queue="default"} 1`), nil
	})
	code, body := dashboardGet(t, base+"/api/jobs/"+strconv.FormatInt(res.Job.ID, 10))
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `"state": "completed"`)

	require.Equal(t, 0, sigtermAndWait(t, cmd))
}
