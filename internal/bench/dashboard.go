package bench

import (
	"cmp"
	"context"
	"fmt"
	"github.com/tributary-run/tributary/internal/riverjob"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/tributary-run/tributary/dashboard"
	"github.com/tributary-run/tributary/migrations"
	"github.com/tributary-run/tributary/queue"
)

// DashboardOptions configures RunDashboard.
type DashboardOptions struct {
	// Rows is how many river_job rows to seed.
	Rows int
	// Requests is how many timed requests go to each endpoint.
	Requests int
	// Keep keeps the seeded schema; Reuse measures on a schema an earlier
	// run kept instead of seeding one.
	Keep   bool
	Reuse  string
	Logger *slog.Logger
}

// RunDashboard seeds opts.Rows river_job rows with COPY into a fresh schema
// (24 hours of history: mostly completed, some discarded, cancelled,
// retryable and scheduled, a backlog of available jobs in four queues),
// VACUUM ANALYZEs it, then times the overview and the first jobs pages
// through the dashboard's HTTP handler, one request at a time, beside the
// baselines of the same run: a full GROUP BY count of the table, the exact
// job read model `tributary stats` prints, and River's own JobList first
// page. It writes the table of percentiles to w.
func RunDashboard(ctx context.Context, pool *pgxpool.Pool, opts DashboardOptions, w io.Writer) (*DashboardResult, error) {
	return benchDashboard(ctx, pool, opts.Rows, opts.Requests, opts.Keep, opts.Reuse, opts.Logger, func(format string, args ...any) {
		fmt.Fprintf(w, format, args...)
	})
}

// LatencyResult is the latency of one timed request.
type LatencyResult struct {
	Name   string  `json:"name"`
	P50Ms  float64 `json:"p50_ms"`
	P95Ms  float64 `json:"p95_ms"`
	P99Ms  float64 `json:"p99_ms"`
	MaxMs  float64 `json:"max_ms"`
	Status int     `json:"status"`
}

// DashboardResult is the outcome of RunDashboard.
type DashboardResult struct {
	Rows      int             `json:"rows"`
	Schema    string          `json:"schema"`
	SeedSecs  float64         `json:"seed_seconds"`
	Requests  int             `json:"requests"`
	CPUs      int             `json:"cpus"`
	Dashboard []LatencyResult `json:"dashboard"`
	Baseline  []LatencyResult `json:"baseline"`
}

func benchDashboard(ctx context.Context, pool *pgxpool.Pool, n, requests int, keep bool, reuse string, logger *slog.Logger, printf func(string, ...any)) (*DashboardResult, error) {
	schema := cmp.Or(reuse, "bench_dashboard_"+randomSuffix())
	res := &DashboardResult{Rows: n, Schema: schema, Requests: requests, CPUs: runtime.NumCPU()}
	if reuse != "" {
		var err error
		if res.Rows, err = countRiverJobs(ctx, pool, schema); err != nil {
			return nil, fmt.Errorf("error reading schema %s to reuse: %w", schema, err)
		}
		printf("reusing schema %s with %d river_job rows\n", schema, res.Rows)
		return measureDashboard(ctx, pool, res, logger, printf)
	}
	m, err := migrations.New(pool, migrations.Config{Schema: schema})
	if err != nil {
		return nil, err
	}
	if _, err := m.Up(ctx); err != nil {
		return nil, err
	}
	if !keep {
		defer func() {
			dropCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
			defer cancel()
			if _, err := pool.Exec(dropCtx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
				logger.Error("error dropping the benchmark schema", "schema", schema, "error", err)
			}
		}()
	}

	start := time.Now()
	if err := seedRiverJobs(ctx, pool, schema, n); err != nil {
		return nil, err
	}
	res.SeedSecs = time.Since(start).Seconds()
	printf("seeded %d river_job rows by COPY into schema %s in %.1fs (incl. VACUUM ANALYZE)\n", n, schema, res.SeedSecs)
	return measureDashboard(ctx, pool, res, logger, printf)
}

func measureDashboard(ctx context.Context, pool *pgxpool.Pool, res *DashboardResult, logger *slog.Logger, printf func(string, ...any)) (*DashboardResult, error) {
	schema, requests := res.Schema, res.Requests

	client, err := queue.NewClient(pool, queue.ClientConfig{Schema: schema, Logger: logger})
	if err != nil {
		return nil, err
	}
	srv, err := dashboard.New(client, dashboard.Config{Logger: logger})
	if err != nil {
		return nil, err
	}
	h := srv.Handler()
	timeHTTP := func(name, path string) (LatencyResult, error) {
		return timeIt(name, requests, func() (int, error) {
			req := httptest.NewRequestWithContext(ctx, http.MethodGet, path, nil)
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != http.StatusOK {
				return rec.Code, fmt.Errorf("GET %s answered %d: %s", path, rec.Code, rec.Body.String())
			}
			return rec.Code, nil
		})
	}
	printf("\n%-56s %9s %9s %9s %9s\n", "request ("+fmt.Sprint(requests)+" each, sequential)", "p50 ms", "p95 ms", "p99 ms", "max ms")
	show := func(r LatencyResult) {
		printf("%-56s %9.2f %9.2f %9.2f %9.2f\n", r.Name, r.P50Ms, r.P95Ms, r.P99Ms, r.MaxMs)
	}
	for _, ep := range []struct{ name, path string }{
		{"dashboard GET /api/overview", "/api/overview"},
		{"dashboard GET / (overview page)", "/"},
		{"dashboard GET /api/jobs (first page)", "/api/jobs"},
		{"dashboard GET /jobs (first page, HTML)", "/jobs"},
		{"dashboard GET /api/jobs?state=discarded", "/api/jobs?state=discarded"},
		{"dashboard GET /api/jobs?state=available&queue=email", "/api/jobs?state=available&queue=email"},
		{"dashboard GET /api/jobs?kind=report.build", "/api/jobs?kind=report.build"},
		{"dashboard GET /metrics", "/metrics"},
	} {
		r, err := timeHTTP(ep.name, ep.path)
		if err != nil {
			return nil, err
		}
		res.Dashboard = append(res.Dashboard, r)
		show(r)
	}

	printf("\nbaselines in the same run:\n")
	full, err := timeIt("full count: GROUP BY queue, state", requests/10, func() (int, error) {
		return 200, countJobsByQueueAndState(ctx, pool, schema)
	})
	if err != nil {
		return nil, err
	}
	res.Baseline = append(res.Baseline, full)
	show(full)
	exact, err := timeIt("exact job stats, every state by queue (tributary stats)", requests/10, func() (int, error) {
		return 200, queue.ReadTx(ctx, pool, 0, func(tx pgx.Tx) error {
			_, err := queue.ReadJobStats(ctx, tx, schema, queue.JobStatsParams{QueueStates: queue.JobStates()})
			return err
		})
	})
	if err != nil {
		return nil, err
	}
	res.Baseline = append(res.Baseline, exact)
	show(exact)
	riverList, err := timeIt("River JobList first page (50, all states)", requests, func() (int, error) {
		_, err := client.River().JobList(ctx, river.NewJobListParams().First(50))
		return 200, err
	})
	if err != nil {
		return nil, err
	}
	res.Baseline = append(res.Baseline, riverList)
	show(riverList)
	printf("(%d CPUs; requests go through the dashboard's HTTP handler in process, so the figures include rendering but not the network)\n", res.CPUs)
	return res, nil
}

// timeIt runs fn a few times to warm up, then n times, and returns the
// latency percentiles.
func timeIt(name string, n int, fn func() (int, error)) (LatencyResult, error) {
	n = max(n, 5)
	for range 3 {
		if _, err := fn(); err != nil {
			return LatencyResult{}, err
		}
	}
	durs := make([]time.Duration, 0, n)
	status := 0
	for range n {
		start := time.Now()
		code, err := fn()
		if err != nil {
			return LatencyResult{}, err
		}
		durs = append(durs, time.Since(start))
		status = code
	}
	slices.Sort(durs)
	pct := func(p float64) float64 {
		i := int(float64(len(durs))*p+0.5) - 1
		i = min(max(i, 0), len(durs)-1)
		return float64(durs[i].Microseconds()) / 1000
	}
	return LatencyResult{Name: name, P50Ms: pct(0.50), P95Ms: pct(0.95), P99Ms: pct(0.99), MaxMs: pct(1), Status: status}, nil
}

// The dashboard benchmark's statements on River's job table: its fixture,
// the count of a reused one, and the full count it is compared with.

// countJobsByQueueAndState is the naive job count the capped one is
// measured against: one pass over the whole table.
func countJobsByQueueAndState(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	_, err := riverjob.CountByQueueState(ctx, pool, schema)
	return err
}

// countRiverJobs counts the rows of schema's river_job.
func countRiverJobs(ctx context.Context, pool *pgxpool.Pool, schema string) (int, error) {
	n, err := riverjob.CountJobs(ctx, pool, schema)
	return int(n), err
}

// seedRiverJobs writes n river_job rows with COPY, then VACUUM ANALYZEs the
// table: 24 hours of history with the mix a busy service has after River's
// retention (completed jobs dominate), plus a backlog of available jobs.
func seedRiverJobs(ctx context.Context, pool *pgxpool.Pool, schema string, n int) error {
	kinds := []string{"email.send", "order.sync", "invoice.render", "tributary.event.dispatch", "tributary.outbox.forward", "report.build", "image.resize", "webhook.deliver"}
	queues := []string{"default", "email", "events", "reports"}
	now := time.Now()
	errorJSON := []byte(`{"at":"2026-01-01T00:00:00Z","attempt":1,"error":"upstream returned 503","trace":""}`)
	i := 0
	src := pgx.CopyFromFunc(func() ([]any, error) {
		if i >= n {
			return nil, nil
		}
		i++
		// Older rows first, so ids grow with time like real inserts.
		created := now.Add(-24 * time.Hour).Add(time.Duration(float64(24*time.Hour) * float64(i) / float64(n)))
		kind := kinds[i%len(kinds)]
		if kind == "report.build" && i%97 != 0 {
			kind = "image.resize" // report.build is a rare kind: ~0.13%
		}
		q := queues[(i/3)%len(queues)]
		var state string
		var attempt int16 = 1
		var attemptedAt, finalizedAt any
		var errs any
		scheduled := created
		switch r := i % 1000; {
		case r < 955:
			state = "completed"
			at := created.Add(20 * time.Millisecond)
			attemptedAt, finalizedAt = at, at.Add(5*time.Millisecond)
		case r < 975:
			state, attempt = "discarded", 25
			at := created.Add(time.Minute)
			if at.After(now) {
				at = now
			}
			attemptedAt, finalizedAt = at, at
			errs = []any{errorJSON}
		case r < 980:
			state = "cancelled"
			attemptedAt, finalizedAt = created, created.Add(time.Second)
		case r < 985:
			state, attempt = "retryable", 3
			attemptedAt = created
			scheduled = now.Add(time.Minute)
			errs = []any{errorJSON}
		case r < 990:
			state, attempt = "scheduled", 0
			scheduled = now.Add(time.Hour)
		case r < 991:
			state = "running"
			attemptedAt = now.Add(-time.Second)
		default:
			state, attempt = "available", 0
		}
		return []any{state, attempt, int16(25), attemptedAt, created, finalizedAt, scheduled, int16(1 + i%4),
			[]byte(fmt.Sprintf(`{"customer_id": %d, "note": "seeded"}`, i)), errs, kind, []byte(`{}`), q, []string{}}, nil
	})
	_, err := riverjob.CopyJobs(ctx, pool, schema,
		[]string{"state", "attempt", "max_attempts", "attempted_at", "created_at", "finalized_at", "scheduled_at", "priority", "args", "errors", "kind", "metadata", "queue", "tags"}, src)
	if err != nil {
		return fmt.Errorf("error seeding river_job with COPY: %w", err)
	}
	return riverjob.VacuumAnalyze(ctx, pool, schema)
}
