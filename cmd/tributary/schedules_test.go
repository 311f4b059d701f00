package main

import (
	"context"
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
)

func TestCLISchedules(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()

	// A worker declares the built-in schedules, then goes away: the CLI
	// works from the table alone.
	worker, logs := startWorker(t, db)
	pgtest.WaitFor(t, 30*time.Second, "the worker to start", func() (bool, error) {
		return strings.Contains(logs.String(), "runtime started"), nil
	})
	pgtest.WaitFor(t, 30*time.Second, "the worker to declare the clean-up schedules and demo.noop", func() (bool, error) {
		var n int
		err := db.Pool.QueryRow(ctx, db.Q(`SELECT count(*) FROM /*schema*/tributary_schedule`)).Scan(&n)
		return n == 6, err
	})
	_, code := stopWorker(t, worker, 30*time.Second)
	require.Equal(t, 0, code, logs.String())

	res := cli(t, db, nil, "schedules", "list")
	require.Equal(t, 0, res.code, res.stderr)
	require.Regexp(t, `(?m)^NAME\s+SPEC\s+TIMEZONE\s+NEXT RUN\s+LAST RUN\s+LAST JOB\s+PAUSED\s+ORPHANED$`, res.stdout)
	require.Regexp(t, `(?m)^demo\.noop\s+@every 1m\s+UTC\s+\S+ \S+\s+-\s+-\s+no\s+no$`, res.stdout)
	require.Contains(t, res.stdout, "tributary.cleanup.outbox_sent")
	require.Contains(t, res.stdout, "tributary.cleanup.workflows")

	res = cli(t, db, nil, "schedules", "trigger", "demo.noop")
	require.Equal(t, 0, res.code, res.stderr)
	m := regexp.MustCompile(`^schedule demo\.noop triggered: job (\d+)\n$`).FindStringSubmatch(res.stdout)
	require.NotNil(t, m, res.stdout)
	jobID, _ := strconv.ParseInt(m[1], 10, 64)
	var kind, schedule string
	require.NoError(t, db.Pool.QueryRow(ctx, db.Q(`SELECT kind, metadata->>'tributary_schedule' FROM /*schema*/river_job WHERE id = $1`), jobID).Scan(&kind, &schedule))
	require.Equal(t, "demo.noop", kind)
	require.Equal(t, "demo.noop", schedule)

	res = cli(t, db, nil, "schedules", "pause", "demo.noop")
	require.Equal(t, 0, res.code, res.stderr)
	require.Equal(t, "schedule demo.noop paused\n", res.stdout)

	res = cli(t, db, nil, "schedules", "list", "--json")
	require.Equal(t, 0, res.code, res.stderr)
	var listing struct {
		Schedules []struct {
			Name         string `json:"name"`
			Paused       bool   `json:"paused"`
			Orphaned     bool   `json:"orphaned"`
			LastJobID    *int64 `json:"last_job_id"`
			LastJobState string `json:"last_job_state"`
		} `json:"schedules"`
	}
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &listing), res.stdout)
	require.Len(t, listing.Schedules, 6)
	require.Equal(t, "demo.noop", listing.Schedules[0].Name)
	require.True(t, listing.Schedules[0].Paused)
	require.False(t, listing.Schedules[0].Orphaned)
	require.Equal(t, jobID, *listing.Schedules[0].LastJobID)
	require.Equal(t, "available", listing.Schedules[0].LastJobState)

	res = cli(t, db, nil, "schedules", "resume", "demo.noop")
	require.Equal(t, 0, res.code, res.stderr)
	require.Regexp(t, `^schedule demo\.noop resumed; next run \S+ \S+\n$`, res.stdout)

	for _, action := range []string{"trigger", "pause", "resume"} {
		res = cli(t, db, nil, "schedules", action, "no.such.schedule")
		require.Equal(t, exitFailure, res.code, "%s: %s", action, res.stderr)
		oneSentence(t, res.stderr)
		require.Contains(t, res.stderr, `"no.such.schedule"`)
		require.Empty(t, res.stdout)
	}
	res = cli(t, db, nil, "schedules", "trigger")
	require.Equal(t, exitUsage, res.code, res.stderr)
	res = cli(t, db, nil, "schedules", "frob")
	require.Equal(t, exitUsage, res.code, res.stderr)
	require.Equal(t, 1, db.CountJobs(t), "only the trigger inserted a job")
}

func TestCLIWorkerBadCleanupConfig(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	for name, value := range map[string]string{
		"TRIBUTARY_CLEANUP_SPEC":          "every hour",
		"TRIBUTARY_OUTBOX_SENT_RETENTION": "a week",
	} {
		res := cli(t, db, []string{name + "=" + value}, "worker")
		require.Equal(t, exitUsage, res.code, res.stderr)
		require.Contains(t, res.stderr, name)
		require.Contains(t, res.stderr, value)
	}
}

// TestCLIWorkerCleansUp runs the real worker with the clean-up every second
// and checks that SENT outbox rows past retention go, recent ones stay, and
// /metrics counts the deletions.
func TestCLIWorkerCleansUp(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, db.Q(`
INSERT INTO /*schema*/tributary_outbox
    (id, event_type, event_version, event_kind, payload, metadata, source_service, status, retry_count, created_at, sent_at)
SELECT gen_random_uuid(), 'test.cleanup', 1, 'domain', '{}', '{}', 'test', 'SENT', 0,
       now() - CASE WHEN g <= 300 THEN interval '8 days' ELSE interval '1 day' END,
       now() - CASE WHEN g <= 300 THEN interval '8 days' ELSE interval '1 day' END
FROM generate_series(1, 400) g`))
	require.NoError(t, err)

	cmd, base := startDashboardProcess(t, db, []string{"TRIBUTARY_CLEANUP_SPEC=@every 1s"}, "worker", "--queues", "default=5,events=5", "--http", "127.0.0.1:0")
	pgtest.WaitFor(t, 30*time.Second, "/metrics to count the clean-up", func() (bool, error) {
		_, body := dashboardGet(t, base+"/metrics")
		return strings.Contains(body, `tributary_cleanup_deleted_rows_total{target="outbox_sent"} 300`), nil
	})
	var left int
	require.NoError(t, db.Pool.QueryRow(ctx, db.Q(`SELECT count(*) FROM /*schema*/tributary_outbox`)).Scan(&left))
	require.Equal(t, 100, left, "rows not past retention stay")
	_, body := dashboardGet(t, base+"/metrics")
	require.Contains(t, body, "tributary_scheduler_fired_jobs_total")
	require.Equal(t, 0, sigtermAndWait(t, cmd))
}

func TestCLIBenchCleanup(t *testing.T) {
	t.Parallel()
	res := cli(t, nil, benchEnv(), "bench", "cleanup", "-n", "3000", "--batch", "500", "--json")
	require.Equal(t, 0, res.code, res.stderr)
	var out struct {
		Rows       int `json:"rows"`
		Kept       int `json:"kept"`
		Statements int `json:"statements"`
	}
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &out), res.stdout)
	require.Equal(t, 3000, out.Rows)
	require.Equal(t, 300, out.Kept)
	require.GreaterOrEqual(t, out.Statements, 7, "3000 rows in statements of at most 500, plus the one that finds none left")

	res = cli(t, nil, benchEnv(), "bench", "cleanup", "--batch", "0")
	require.Equal(t, exitUsage, res.code, res.stderr)
	require.Contains(t, res.stderr, "--batch 0")
}
