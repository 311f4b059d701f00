package dashboard

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/amqpbridge"
	"github.com/tributary-run/tributary/internal/amqptest"
	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/jobs/batch"
	"github.com/tributary-run/tributary/jobs/events"
	"github.com/tributary-run/tributary/queue"
)

// grafanaDashboard is the part of docs/grafana/tributary.json the test reads.
type grafanaDashboard struct {
	UID        string `json:"uid"`
	Title      string `json:"title"`
	Templating struct {
		List []struct {
			Name       string `json:"name"`
			Definition string `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
	Panels []struct {
		ID      int    `json:"id"`
		Type    string `json:"type"`
		Title   string `json:"title"`
		Targets []struct {
			RefID string `json:"refId"`
			Expr  string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

var metricNameRE = regexp.MustCompile(`\b(?:tributary|go|process)_[a-z0-9_]+\b`)

// queriedMetrics returns every metric name the dashboard's PromQL (panel
// targets and template variables) names.
func queriedMetrics(t *testing.T, d grafanaDashboard) []string {
	t.Helper()
	var names []string
	add := func(expr string) {
		for _, n := range metricNameRE.FindAllString(expr, -1) {
			if !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
	}
	for _, p := range d.Panels {
		if p.Type == "row" {
			continue
		}
		require.NotEmpty(t, p.Targets, "panel %q has no query", p.Title)
		for _, tg := range p.Targets {
			require.NotEmpty(t, tg.RefID, "panel %q", p.Title)
			require.NotEmpty(t, tg.Expr, "panel %q", p.Title)
			add(tg.Expr)
		}
	}
	for _, v := range d.Templating.List {
		add(v.Definition)
	}
	slices.Sort(names)
	return names
}

// Every metric the Grafana dashboard queries exists on a real /metrics
// scrape of a worker that runs every feature (jobs, events, an AMQP
// consumer, batch flushes) against real Postgres and RabbitMQ.
func TestGrafanaDashboardQueriesExistingMetrics(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../docs/grafana/tributary.json")
	require.NoError(t, err)
	var dash grafanaDashboard
	require.NoError(t, json.Unmarshal(raw, &dash))
	require.Equal(t, "tributary", dash.UID)
	ids := map[int]bool{}
	for _, p := range dash.Panels {
		require.False(t, ids[p.ID], "panel id %d twice", p.ID)
		ids[p.ID] = true
	}
	names := queriedMetrics(t, dash)
	// What the dashboard is for.
	for _, want := range []string{
		"tributary_jobs_worked_total", "tributary_queue_jobs", "tributary_queue_oldest_available_age_seconds",
		"tributary_outbox_rows", "tributary_event_lanes_blocked", "tributary_amqp_retried_total",
		"tributary_amqp_dead_lettered_total", "tributary_batch_staged_bytes", "tributary_batch_bytes_flushed_total",
	} {
		require.Contains(t, names, want)
	}

	db := pgtest.New(t)
	bcfg := amqpbridge.Config{URL: amqptest.URL(), QueuePrefix: amqptest.UniqueName("grafana"), ConnectionName: amqptest.UniqueName("tributary-grafana")}
	cons, err := amqpbridge.NewConsumer(bcfg, amqpbridge.ConsumerConfig{Queue: "orders", Handler: func(context.Context, *amqpbridge.Delivery) error { return nil }})
	require.NoError(t, err)
	topo := cons.Topology()
	qnames := []string{topo.Main, topo.Failed}
	for _, r := range topo.Retry {
		qnames = append(qnames, r.Queue)
	}
	amqptest.DeleteQueuesOnCleanup(t, amqptest.Conn(t), qnames...)
	amqpCollector := amqpbridge.NewCollector()
	amqpCollector.AddConsumer(cons)

	// access_logs flushes at once (object metrics), audit stays staged.
	streams := batch.Config{Streams: map[string]batch.StreamConfig{"access_logs": {MaxEvents: 1}}}
	var svc *Service
	var stager *batch.Stager
	rt := pgtest.StartRuntime(t, db, queue.RuntimeConfig{}, func(rt *queue.Runtime) {
		registerTestJobs(rt)
		billing, err := events.NewConsumer(events.ConsumerConfig{Name: "billing"})
		require.NoError(t, err)
		inst, err := events.Install(rt, events.InstallConfig{Consumers: []*events.Consumer{billing}})
		require.NoError(t, err)
		sink, err := batch.OpenSink(context.Background(), "mem://")
		require.NoError(t, err)
		fw, err := batch.Register(rt, batch.FlusherConfig{Streams: streams, Sink: sink}, batch.AgeTimerConfig{})
		require.NoError(t, err)
		stager, err = batch.NewStager(rt.Client, streams)
		require.NoError(t, err)
		require.NoError(t, rt.AddService(cons))
		_, svc, err = InstallWorker(rt, Config{Addr: "127.0.0.1:0", Logger: pgtest.Logger(t), Collectors: []prometheus.Collector{
			events.NewCollector(inst.Forwarder, inst.Dispatcher), amqpCollector, batch.NewCollector(stager, fw),
		}})
		require.NoError(t, err)
	})
	ctx := context.Background()
	job, err := rt.Enqueue(ctx, noopArgs{}, nil)
	require.NoError(t, err)
	failing, err := rt.Enqueue(ctx, failArgs{Times: -1}, &queue.EnqueueOpts{MaxAttempts: 1})
	require.NoError(t, err)
	require.NoError(t, stager.Stage(ctx, "access_logs", []byte(`{"path":"/"}`)))
	require.NoError(t, stager.Stage(ctx, "audit", []byte(`{"who":"me"}`)))
	db.WaitForJobState(t, job.Job.ID, rivertype.JobStateCompleted, 30*time.Second)
	db.WaitForJobState(t, failing.Job.ID, rivertype.JobStateDiscarded, 30*time.Second)

	var body string
	var missing []string
	pgtest.WaitFor(t, 30*time.Second, "every queried metric on /metrics", func() (bool, error) {
		res := get(t, "http://"+svc.Addr(), "/metrics")
		if res.status != 200 {
			return false, nil
		}
		body, missing = res.body, nil
		for _, n := range names {
			if !regexp.MustCompile(`(?m)^` + n + `[{ ]`).MatchString(body) {
				missing = append(missing, n)
			}
		}
		if len(missing) > 0 {
			return false, fmt.Errorf("missing %v", missing)
		}
		return true, nil
	})
	require.Empty(t, missing, "queried by docs/grafana/tributary.json, absent from /metrics")
	t.Logf("%d metrics queried, all on /metrics: %s", len(names), strings.Join(names, ", "))
}

// tributary_event_lanes_blocked counts a consumer's blocked lanes, as the
// lanes page lists them.
func TestMetricLanesBlocked(t *testing.T) {
	t.Parallel()
	_, bundle := setupServer(t, Config{})
	db, base := bundle.db, bundle.http.URL
	w := startLaneWorld(t, db)
	series := `tributary_event_lanes_blocked{consumer="audit"}`
	pgtest.WaitFor(t, 10*time.Second, "the audit consumer's gauge at 0", func() (bool, error) {
		v, ok := metricValue(t, get(t, base, "/metrics").body, series)
		return ok && v == 0, nil
	})
	for _, agg := range []string{"A", "B"} {
		waitDispatch(t, db, w.emit(t, db, agg, "fail"), "discarded")
	}
	pgtest.WaitFor(t, 10*time.Second, series+" at 2", func() (bool, error) {
		v, _ := metricValue(t, get(t, base, "/metrics").body, series)
		return v == 2, nil
	})
}

// tributary_event_consumer_pending_dispatches comes from a count shared
// with the consumers page and redone in the background once older than
// PendingDispatchesMaxAge: a dispatch that starts and one that finishes
// both show on later scrapes, with the count's age beside them.
func TestMetricPendingDispatchesRecounted(t *testing.T) {
	t.Parallel()
	_, bundle := setupServer(t, Config{PendingDispatchesMaxAge: 100 * time.Millisecond})
	db, base := bundle.db, bundle.http.URL
	w := startLaneWorld(t, db)
	series := `tributary_event_consumer_pending_dispatches{consumer="audit"}`
	pgtest.WaitFor(t, 10*time.Second, "the audit consumer's gauge at 0", func() (bool, error) {
		v, ok := metricValue(t, get(t, base, "/metrics").body, series)
		return ok && v == 0, nil
	})
	id := w.emit(t, db, "A", "gate") // its handler waits: one running dispatch
	pgtest.WaitFor(t, 10*time.Second, series+" at 1", func() (bool, error) {
		body := get(t, base, "/metrics").body
		v, _ := metricValue(t, body, series)
		_, aged := metricValue(t, body, "tributary_event_consumer_pending_dispatches_age_seconds")
		return v == 1 && aged, nil
	})
	page := get(t, base, "/api/consumers").body
	require.Contains(t, page, `"pending": 1`, "the page shares the count")
	require.Contains(t, page, `"pending_counted_at"`)
	close(w.gate)
	w.waitHandled(t, id)
	pgtest.WaitFor(t, 10*time.Second, series+" back at 0", func() (bool, error) {
		v, _ := metricValue(t, get(t, base, "/metrics").body, series)
		return v == 0, nil
	})
}
