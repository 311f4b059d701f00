package bench

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
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
	"github.com/tributary-run/tributary/internal/riverjob"
	"github.com/tributary-run/tributary/jobs/workflow"
	"github.com/tributary-run/tributary/migrations"
	"github.com/tributary-run/tributary/queue"
)

// DashboardOptions configures RunDashboard.
type DashboardOptions struct {
	// Rows is how many river_job rows to seed.
	Rows int
	// Requests is how many timed requests go to each endpoint.
	Requests int
	// Workflows is how many five-task workflows to seed beside the jobs
	// (plus one running fan-out of WideTasks tasks). A reused schema must
	// have been seeded with the same number. Defaults to 100,000; negative
	// seeds none and skips the workflows pages.
	Workflows int
	// Keep keeps the seeded schema; Reuse measures on a schema an earlier
	// run kept instead of seeding one.
	Keep   bool
	Reuse  string
	Logger *slog.Logger
}

// RunDashboard seeds opts.Rows river_job rows with COPY into a fresh schema
// (24 hours of history: mostly completed, some discarded, cancelled,
// retryable and scheduled, a backlog of available jobs in four queues) and
// opts.Workflows workflows with their tasks, VACUUM ANALYZEs them, then
// times the overview, the first and deep jobs pages, /metrics and the
// workflows pages through the dashboard's HTTP handler, one request at a
// time, beside the baselines of the same run: a full GROUP BY count of the
// table, the exact job read model `tributary stats` prints, and River's own
// JobList first page. It writes the table of percentiles to w.
func RunDashboard(ctx context.Context, pool *pgxpool.Pool, opts DashboardOptions, w io.Writer) (*DashboardResult, error) {
	if opts.Workflows == 0 {
		opts.Workflows = DashboardWorkflowsDefault
	}
	return benchDashboard(ctx, pool, opts, func(format string, args ...any) {
		fmt.Fprintf(w, format, args...)
	})
}

// DashboardWorkflowsDefault is DashboardOptions.Workflows' default; the
// seeded fan-out has WideTasks tasks.
const (
	DashboardWorkflowsDefault = 100_000
	WideTasks                 = 1000
)

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
	Workflows int             `json:"workflows"`
	Schema    string          `json:"schema"`
	SeedSecs  float64         `json:"seed_seconds"`
	Requests  int             `json:"requests"`
	CPUs      int             `json:"cpus"`
	Dashboard []LatencyResult `json:"dashboard"`
	Baseline  []LatencyResult `json:"baseline"`
}

func benchDashboard(ctx context.Context, pool *pgxpool.Pool, opts DashboardOptions, printf func(string, ...any)) (*DashboardResult, error) {
	n, keep, reuse, logger := opts.Rows, opts.Keep, opts.Reuse, opts.Logger
	schema := cmp.Or(reuse, "bench_dashboard_"+randomSuffix())
	res := &DashboardResult{Rows: n, Workflows: max(opts.Workflows, 0), Schema: schema, Requests: opts.Requests, CPUs: runtime.NumCPU()}
	m, err := migrations.New(pool, migrations.Config{Schema: schema})
	if err != nil {
		return nil, err
	}
	if reuse != "" {
		// A schema kept by an earlier version lacks the tables added
		// since, which the pages read (the consumers page reads the lane
		// events of migration 0016): bring it up first.
		up, err := m.Up(ctx)
		if err != nil {
			return nil, fmt.Errorf("error migrating schema %s to reuse: %w", schema, err)
		}
		for _, st := range up.Steps {
			printf("migrated the reused schema: %s %04d %s\n", st.Line, st.Version, st.Name)
		}
		if res.Rows, err = countRiverJobs(ctx, pool, schema); err != nil {
			return nil, fmt.Errorf("error reading schema %s to reuse: %w", schema, err)
		}
		visible, pages, err := riverjob.AllVisible(ctx, pool, schema)
		if err != nil {
			return nil, err
		}
		printf("reusing schema %s with %d river_job rows (%d of %d pages all-visible)\n", schema, res.Rows, visible, pages)
		return measureDashboard(ctx, pool, res, logger, printf)
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
	if err := seedConsumers(ctx, pool, schema); err != nil {
		return nil, err
	}
	if err := vacuumSeeded(ctx, pool, schema, printf); err != nil {
		return nil, err
	}
	res.SeedSecs = time.Since(start).Seconds()
	printf("seeded %d river_job rows by COPY into schema %s in %.1fs (incl. VACUUM ANALYZE)\n", n, schema, res.SeedSecs)
	if res.Workflows > 0 {
		start := time.Now()
		if err := seedWorkflows(ctx, pool, schema, res.Workflows, WideTasks, int64(n)); err != nil {
			return nil, err
		}
		printf("seeded %d workflows (%d tasks) and one of %d tasks by COPY in %.1fs (incl. VACUUM ANALYZE)\n",
			res.Workflows, res.Workflows*len(diamondTasks), WideTasks+2, time.Since(start).Seconds())
	}
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
	get := func(path string) (*httptest.ResponseRecorder, error) {
		req := httptest.NewRequestWithContext(ctx, http.MethodGet, path, nil)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			return rec, fmt.Errorf("GET %s answered %d: %s", path, rec.Code, rec.Body.String())
		}
		return rec, nil
	}
	timeHTTP := func(name, path string) (LatencyResult, error) {
		return timeIt(name, requests, func() (int, error) {
			rec, err := get(path)
			return rec.Code, err
		})
	}
	deep, err := deepPages(get, res.Workflows)
	if err != nil {
		return nil, err
	}
	printf("\n%-64s %9s %9s %9s %9s\n", "request ("+fmt.Sprint(requests)+" each, sequential)", "p50 ms", "p95 ms", "p99 ms", "max ms")
	show := func(r LatencyResult) {
		printf("%-64s %9.2f %9.2f %9.2f %9.2f\n", r.Name, r.P50Ms, r.P95Ms, r.P99Ms, r.MaxMs)
	}
	for _, ep := range append([]endpoint{
		{"dashboard GET /api/overview", "/api/overview"},
		{"dashboard GET / (overview page)", "/"},
		{"dashboard GET /api/jobs (first page)", "/api/jobs"},
		{"dashboard GET /jobs (first page, HTML)", "/jobs"},
		{"dashboard GET /api/jobs?state=discarded", "/api/jobs?state=discarded"},
		{"dashboard GET /api/jobs?state=available&queue=email", "/api/jobs?state=available&queue=email"},
		{"dashboard GET /api/jobs?kind=report.build", "/api/jobs?kind=report.build"},
		{"dashboard GET /metrics", "/metrics"},
		{"dashboard GET /consumers (pending dispatches)", "/consumers"},
	}, deep...) {
		r, err := timeHTTP(ep.name, ep.path)
		if err != nil {
			return nil, err
		}
		res.Dashboard = append(res.Dashboard, r)
		show(r)
	}

	if res.Workflows > 0 {
		wfc := workflow.NewClient(client)
		for _, l := range attrListings(res.Workflows) {
			r, err := timeIt(l.name, requests, func() (int, error) {
				_, err := wfc.List(ctx, workflow.ListParams{Attributes: l.attrs})
				return 200, err
			})
			if err != nil {
				return nil, err
			}
			res.Dashboard = append(res.Dashboard, r)
			show(r)
		}
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

// endpoint is one timed request.
type endpoint struct{ name, path string }

// deepJobsPages is how many pages the deep jobs page is behind the first.
const deepJobsPages = 200

// deepPages finds the cursors of the pages behind the first ones, by
// following them as a user paging through the dashboard would (untimed):
// the jobs page deepJobsPages pages in, the jobs in the middle and near the
// start of the table (unfiltered and filtered), and, with workflows seeded,
// the workflows pages: the list, filtered lists, its middle by cursor and
// the pages of a five-task and of the wide workflow (its first and a later
// page of tasks, and its JSON with every task).
func deepPages(get func(string) (*httptest.ResponseRecorder, error), workflows int) ([]endpoint, error) {
	var page struct {
		Jobs       []struct{ ID int64 } `json:"jobs"`
		NextBefore int64                `json:"next_before"`
	}
	next, deep, pages := "/api/jobs", int64(0), 1
	for ; pages <= deepJobsPages; pages++ {
		rec, err := get(next)
		if err != nil {
			return nil, err
		}
		page.Jobs, page.NextBefore = nil, 0 // omitted on the last page
		if err := json.Unmarshal(rec.Body.Bytes(), &page); err != nil {
			return nil, fmt.Errorf("error reading %s: %w", next, err)
		}
		if page.NextBefore == 0 {
			break // a small table: its last page is the deepest
		}
		deep = page.NextBefore
		next = fmt.Sprintf("/api/jobs?before=%d", deep)
	}
	deepPath := "/jobs"
	if deep > 0 {
		deepPath = fmt.Sprintf("/jobs?before=%d", deep)
	}
	rec, err := get("/api/jobs?limit=1")
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &page); err != nil || len(page.Jobs) == 0 {
		return nil, fmt.Errorf("error reading the newest job: %v (%d jobs)", err, len(page.Jobs))
	}
	middle, early := page.Jobs[0].ID/2, page.Jobs[0].ID/10
	eps := []endpoint{
		{fmt.Sprintf("dashboard GET /jobs (page %d by cursor, HTML)", pages), deepPath},
		{"dashboard GET /api/jobs?before=<middle id>", fmt.Sprintf("/api/jobs?before=%d", middle)},
		{"dashboard GET /api/jobs?state=discarded&before=<middle>", fmt.Sprintf("/api/jobs?state=discarded&before=%d", middle)},
		{"dashboard GET /api/jobs?kind=report.build&before=<10%>", fmt.Sprintf("/api/jobs?kind=report.build&before=%d", early)},
		{"dashboard GET /api/jobs?state=available&queue=email&before=<10%>", fmt.Sprintf("/api/jobs?state=available&queue=email&before=%d", early)},
	}
	if workflows <= 0 {
		return eps, nil
	}
	id := func(key string) (string, error) {
		rec, err := get("/api/workflows/" + key)
		if err != nil {
			return "", err
		}
		var wf struct{ ID string }
		if err := json.Unmarshal(rec.Body.Bytes(), &wf); err != nil || wf.ID == "" {
			return "", fmt.Errorf("error reading workflow %s: %v", key, err)
		}
		return wf.ID, nil
	}
	middleWF, err := id(seededWorkflowKey(workflows / 2))
	if err != nil {
		return nil, err
	}
	wide, err := id(seededWorkflowKey(workflows))
	if err != nil {
		return nil, err
	}
	return append(eps,
		endpoint{"dashboard GET /workflows (first page, HTML)", "/workflows"},
		endpoint{"dashboard GET /api/workflows", "/api/workflows"},
		endpoint{"dashboard GET /api/workflows?status=failed", "/api/workflows?status=failed"},
		endpoint{"dashboard GET /api/workflows?name=report.nightly (rare)", "/api/workflows?name=report.nightly"},
		endpoint{"dashboard GET /api/workflows?status=running&name=invoice.run", "/api/workflows?status=running&name=invoice.run"},
		endpoint{"dashboard GET /api/workflows?after=<middle>", "/api/workflows?after=" + middleWF},
		endpoint{"dashboard GET /workflows/ID (5 tasks, HTML)", "/workflows/" + middleWF},
		endpoint{"dashboard GET /api/workflows/ID (5 tasks)", "/api/workflows/" + middleWF},
		endpoint{fmt.Sprintf("dashboard GET /workflows/ID (%d tasks, HTML)", WideTasks+2), "/workflows/" + wide},
		endpoint{fmt.Sprintf("dashboard GET /workflows/ID?tasks=900 (%d tasks, HTML)", WideTasks+2), "/workflows/" + wide + "?tasks=900"},
		endpoint{fmt.Sprintf("dashboard GET /api/workflows/ID (%d tasks)", WideTasks+2), "/api/workflows/" + wide},
		endpoint{"dashboard GET /api/workflows?attr=customer=<c> (10 matches)", "/api/workflows?attr=customer%3D" + benchCustomer(workflows)},
		endpoint{"dashboard GET /api/workflows?attr=region=eu (a quarter)", "/api/workflows?attr=region%3Deu"},
		endpoint{"dashboard GET /api/workflows?attr=cohort=early (oldest 2 %)", "/api/workflows?attr=cohort%3Dearly"},
		endpoint{"dashboard GET /api/workflows?attr=customer=<c>&attr=region=<r>", "/api/workflows?attr=customer%3D" + benchCustomer(workflows) + "&attr=region%3D" + benchRegion(workflows)},
	), nil
}

// benchCustomer is the customer the attribute listings look up, and
// benchRegion the region of its workflows (every one, when n/10 is a
// multiple of four).
func benchCustomer(n int) string { return seededCustomer(42 % max(n/10, 1)) }
func benchRegion(n int) string   { return seededRegions[(42%max(n/10, 1))%len(seededRegions)] }

// attrListings are the listings `tributary workflows list --attr` runs
// (workflow.Client.List, the newest 50), timed on their own: the dashboard
// pages above add the counts per status of the filter.
func attrListings(n int) []struct {
	name  string
	attrs map[string]string
} {
	return []struct {
		name  string
		attrs map[string]string
	}{
		{"workflows list --attr customer=<c> (10 matches)", map[string]string{"customer": benchCustomer(n)}},
		{"workflows list --attr region=eu (a quarter)", map[string]string{"region": "eu"}},
		{"workflows list --attr cohort=early (oldest 2 %)", map[string]string{"cohort": "early"}},
		{"workflows list --attr customer=<c> --attr region=<r>", map[string]string{"customer": benchCustomer(n), "region": benchRegion(n)}},
	}
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

// seedRiverJobs writes n river_job rows with COPY (vacuumSeeded then
// vacuums them): 24 hours of history with the mix a busy service has after River's
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
		args := fmt.Sprintf(`{"customer_id": %d, "note": "seeded"}`, i)
		if kind == riverjob.DispatchKind {
			// A dispatch job's args name its consumer (the pending-dispatches
			// gauge counts by it); five consumers share the events.
			args = fmt.Sprintf(`{"consumer": %q, "event_id": %d}`, seededConsumer((i/1000)%seededConsumers), i)
		}
		return []any{state, attempt, int16(25), attemptedAt, created, finalizedAt, scheduled, int16(1 + i%4),
			[]byte(args), errs, kind, []byte(`{}`), q, []string{}}, nil
	})
	_, err := riverjob.CopyJobs(ctx, pool, schema,
		[]string{"state", "attempt", "max_attempts", "attempted_at", "created_at", "finalized_at", "scheduled_at", "priority", "args", "errors", "kind", "metadata", "queue", "tags"}, src)
	if err != nil {
		return fmt.Errorf("error seeding river_job with COPY: %w", err)
	}
	return nil
}

// olderSnapshotsWait bounds how long vacuumSeeded waits for transactions
// older than the seed.
const olderSnapshotsWait = 3 * time.Minute

// vacuumSeeded VACUUM ANALYZEs the seeded job table once no other session
// of the database holds a transaction that began before the seed ended
// (waiting at most olderSnapshotsWait), and prints how much of the table
// the visibility map marks all-visible. A VACUUM while such a transaction
// is open (another benchmark's or test's, on a shared server) cannot mark
// the seeded rows visible to all, and every capped count, an index-only
// scan, then reads the heap: the overview took 816 ms instead of 30 at 10M
// jobs with no page marked.
func vacuumSeeded(ctx context.Context, pool *pgxpool.Pool, schema string, printf func(string, ...any)) error {
	seeded := time.Now()
	deadline := seeded.Add(olderSnapshotsWait)
	for {
		var older int
		if err := pool.QueryRow(ctx, olderTransactionsSQL, seeded).Scan(&older); err != nil {
			return fmt.Errorf("error looking for transactions older than the seed: %w", err)
		}
		if older == 0 {
			break
		}
		if time.Now().After(deadline) {
			printf("warning: %d transactions older than the seed still open after %s; vacuuming anyway\n", older, olderSnapshotsWait)
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
	if err := riverjob.VacuumAnalyze(ctx, pool, schema); err != nil {
		return err
	}
	visible, pages, err := riverjob.AllVisible(ctx, pool, schema)
	if err != nil {
		return err
	}
	printf("visibility map: %d of %d river_job pages all-visible (waited %.1fs for older transactions)\n", visible, pages, time.Since(seeded).Seconds())
	return nil
}

// olderTransactionsSQL counts the other sessions of this database whose
// transaction began before $1: they hold back what VACUUM may mark visible.
const olderTransactionsSQL = `
SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid() AND xact_start < $1`
