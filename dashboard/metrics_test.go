package dashboard

import (
	"context"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/jobs/workflow"
	"github.com/tributary-run/tributary/queue"
)

// metricValue finds one sample in Prometheus text output; ok is false when
// the series is absent.
func metricValue(t *testing.T, body, series string) (float64, bool) {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindStringSubmatch(body)
	if m == nil {
		return 0, false
	}
	v, err := strconv.ParseFloat(m[1], 64)
	require.NoError(t, err)
	return v, true
}

func TestMetricsChangeWhenWorkHappens(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	var svc *Service
	rt := pgtest.StartRuntime(t, db, queue.RuntimeConfig{}, func(rt *queue.Runtime) {
		registerTestJobs(rt)
		var err error
		_, svc, err = InstallWorker(rt, Config{Addr: "127.0.0.1:0", Logger: pgtest.Logger(t), MetricsCountsMaxAge: 50 * time.Millisecond})
		require.NoError(t, err)
	})
	base := "http://" + svc.Addr()
	ctx := context.Background()

	scrape := func() string {
		res := get(t, base, "/metrics")
		require.Equal(t, 200, res.status)
		return res.body
	}
	before := scrape()
	_, ok := metricValue(t, before, `tributary_jobs_worked_total{kind="test.noop",outcome="completed",queue="default"}`)
	require.False(t, ok, "nothing worked yet")
	v, ok := metricValue(t, before, `tributary_outbox_rows{status="PENDING"}`)
	require.True(t, ok)
	require.Zero(t, v)
	v, _ = metricValue(t, before, `tributary_outbox_forward_lag_seconds`)
	require.Zero(t, v)

	var last int64
	for range 3 {
		res, err := rt.Enqueue(ctx, noopArgs{}, nil)
		require.NoError(t, err)
		last = res.Job.ID
	}
	var failIDs []int64
	for range 2 {
		res, err := rt.Enqueue(ctx, failArgs{Times: -1}, &queue.EnqueueOpts{MaxAttempts: 1})
		require.NoError(t, err)
		failIDs = append(failIDs, res.Job.ID)
	}
	_, err := rt.Enqueue(ctx, sleepArgs{MS: 1}, &queue.EnqueueOpts{ScheduledAt: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	// A queue nobody works: its depth only grows.
	for range 2 {
		_, err := rt.Enqueue(ctx, noopArgs{}, &queue.EnqueueOpts{Queue: "idle"})
		require.NoError(t, err)
	}
	// An outbox row waiting to be forwarded for 30 seconds.
	_, err = db.Pool.Exec(ctx, db.Q(`INSERT INTO /*schema*/tributary_outbox
		(id, event_type, event_version, event_kind, payload, metadata, source_service, status, retry_count, created_at)
		VALUES ($1, 'order.placed', 1, 'domain', '{}', '{}', 'test', 'PENDING', 0, now() - interval '30 seconds')`), uuid.New())
	require.NoError(t, err)

	db.WaitForJobState(t, last, rivertype.JobStateCompleted, 10*time.Second)
	for _, id := range failIDs {
		db.WaitForJobState(t, id, rivertype.JobStateDiscarded, 10*time.Second)
	}
	var body string
	pgtest.WaitFor(t, 10*time.Second, "job counters to reach their values", func() (bool, error) {
		body = scrape()
		worked, _ := metricValue(t, body, `tributary_jobs_worked_total{kind="test.noop",outcome="completed",queue="default"}`)
		failed, _ := metricValue(t, body, `tributary_jobs_failed_total{kind="test.fail",queue="default"}`)
		// The counts come from a read shared by the scrapes, redone in the
		// background once older than MetricsCountsMaxAge.
		completed, _ := metricValue(t, body, `tributary_jobs{state="completed"}`)
		discarded, _ := metricValue(t, body, `tributary_jobs{state="discarded"}`)
		return worked == 3 && failed == 2 && completed == 3 && discarded == 2, nil
	})
	for series, want := range map[string]float64{
		`tributary_jobs_worked_total{kind="test.fail",outcome="failed",queue="default"}`: 2,
		`tributary_job_duration_seconds_count{kind="test.noop",queue="default"}`:         3,
		`tributary_job_duration_seconds_count{kind="test.fail",queue="default"}`:         2,
		`tributary_queue_jobs{queue="idle",state="available"}`:                           2,
		`tributary_queue_jobs{queue="default",state="scheduled"}`:                        1,
		`tributary_jobs{state="completed"}`:                                              3,
		`tributary_jobs{state="discarded"}`:                                              2,
		`tributary_outbox_rows{status="PENDING"}`:                                        1,
		`tributary_dashboard_scrape_error`:                                               0,
	} {
		got, ok := metricValue(t, body, series)
		require.True(t, ok, "series %s missing from:\n%s", series, body)
		require.Equal(t, want, got, series)
	}
	lag, _ := metricValue(t, body, `tributary_outbox_forward_lag_seconds`)
	require.GreaterOrEqual(t, lag, 30.0)
	age, ok := metricValue(t, body, `tributary_queue_oldest_available_age_seconds{queue="idle"}`)
	require.True(t, ok)
	require.Greater(t, age, 0.0)
	require.Contains(t, body, "go_goroutines", "the Go collector is on the dashboard's own registry")
}

// TestWorkflowMetrics checks the workflow gauges of the database collector
// and the coordinator's counters (NewWorkflowCollector) after real work.
func TestWorkflowMetrics(t *testing.T) {
	t.Parallel()
	b := setupWorkflows(t, Config{MetricsCountsMaxAge: 50 * time.Millisecond})
	id := b.start(t, fanoutName, `{"width":4,"fail":1}`, nil)
	b.waitStatus(t, id, workflow.StatusFailed)
	// A running one whose tasks wait: its job sits on a queue nobody works.
	wf := workflow.New("idle", nil)
	wf.Add("a", noopArgs{}, &workflow.TaskOpts{InsertOpts: idleOpts()})
	wf.Add("b", noopArgs{}, &workflow.TaskOpts{Deps: []string{"a"}, InsertOpts: idleOpts()})
	_, err := b.wfc.Insert(context.Background(), wf)
	require.NoError(t, err)

	var body string
	pgtest.WaitFor(t, 10*time.Second, "the coordinator's counters on /metrics", func() (bool, error) {
		body = get(t, b.base, "/metrics").body
		v, _ := metricValue(t, body, `tributary_workflows_task_outcomes_total{outcome="completed"}`)
		running, _ := metricValue(t, body, `tributary_workflows{status="running"}`)
		return v == 5 && running == 1, nil // split, three parts, sum
	})
	for series, want := range map[string]float64{
		`tributary_workflows{status="failed"}`:                      1,
		`tributary_workflows{status="running"}`:                     1,
		`tributary_workflows{status="completed"}`:                   0,
		`tributary_workflows_running_tasks{state="pending"}`:        1,
		`tributary_workflows_running_tasks{state="active"}`:         1,
		`tributary_workflows_running_tasks{state="completed"}`:      0,
		`tributary_workflows_running_tasks_capped`:                  0,
		`tributary_workflows_task_outcomes_total{outcome="failed"}`: 1,
		`tributary_workflows_task_outcomes_total{outcome="stale"}`:  0,
		`tributary_dashboard_scrape_error`:                          0,
	} {
		v, ok := metricValue(t, body, series)
		require.True(t, ok, "%s on /metrics", series)
		require.Equal(t, want, v, series)
	}
	_, ok := metricValue(t, body, `tributary_workflows_completion_batches_total`)
	require.True(t, ok)
	require.NoError(t, prometheus.NewPedanticRegistry().Register(NewWorkflowCollector(b.coord)))
}

func idleOpts() *river.InsertOpts { return &river.InsertOpts{Queue: "idle"} }

// TestMetricsCountsShared checks that the job and workflow gauges come from
// one read shared by the scrapes, with its age, while the overview reads
// the counts live.
func TestMetricsCountsShared(t *testing.T) {
	t.Parallel()
	srv, bundle := setupServer(t, Config{MetricsCountsMaxAge: time.Hour})
	base := bundle.http.URL
	series := `tributary_queue_jobs{queue="idle",state="available"}`
	first := get(t, base, "/metrics").body
	_, ok := metricValue(t, first, series)
	require.False(t, ok, "no idle queue yet")
	_, ok = metricValue(t, first, `tributary_dashboard_counts_age_seconds`)
	require.True(t, ok)

	_, err := bundle.db.Pool.Exec(context.Background(), bundle.db.Q(`INSERT INTO /*schema*/river_job (args, kind, max_attempts, queue, state)
		VALUES ('{}', 'test.noop', 1, 'idle', 'available')`))
	require.NoError(t, err)
	ov, err := srv.Overview(context.Background())
	require.NoError(t, err)
	live := map[string]int64{}
	for _, q := range ov.Queues {
		live[q.Queue] = q.States["available"].N
	}
	require.EqualValues(t, 1, live["idle"], "the overview counts live")

	second := get(t, base, "/metrics").body
	_, ok = metricValue(t, second, series)
	require.False(t, ok, "the scrape serves the shared read, not younger than an hour")
	age, ok := metricValue(t, second, `tributary_dashboard_counts_age_seconds`)
	require.True(t, ok)
	require.GreaterOrEqual(t, age, 0.0)
}
