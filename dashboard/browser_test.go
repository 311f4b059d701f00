package dashboard

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/jobs/workflow"
	"github.com/tributary-run/tributary/limits"
	"github.com/tributary-run/tributary/queue"
)

const chromiumPath = "/usr/bin/chromium"

const chromiumInstall = "apt-get update && apt-get install -y chromium"

var chromiumOnce sync.Once

// requireChromium finds Debian's chromium or installs it; under CI=true it
// fails with the command to run instead.
func requireChromium(t *testing.T) {
	t.Helper()
	chromiumOnce.Do(func() {
		if _, err := os.Stat(chromiumPath); err == nil {
			return
		}
		if os.Getenv("CI") == "true" {
			return
		}
		t.Logf("installing chromium: %s", chromiumInstall)
		out, err := exec.Command("sh", "-c", chromiumInstall).CombinedOutput()
		if err != nil {
			t.Logf("installing chromium failed: %v\n%s", err, out)
		}
	})
	if _, err := os.Stat(chromiumPath); err != nil {
		t.Fatalf("the browser test needs Debian's chromium at %s; install it with: %s", chromiumPath, chromiumInstall)
	}
}

// newBrowser starts a headless chromium with a fresh profile.
func newBrowser(t *testing.T) context.Context {
	t.Helper()
	requireChromium(t)
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromiumPath),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("password-store", "basic"),
		chromedp.WindowSize(1280, 900),
	}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(allocCtx)
	ctx, cancelTimeout := context.WithTimeout(ctx, 90*time.Second)
	t.Cleanup(func() {
		cancelTimeout()
		cancelCtx()
		cancelAlloc()
	})
	return ctx
}

// screenshot saves the whole page under testdata/screenshots (ignored by
// git).
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	dir := filepath.Join("testdata", "screenshots")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644))
}

func TestBrowser(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	var svc *Service
	coord, err := workflow.NewCoordinator(db.Pool, workflow.CoordinatorConfig{Schema: db.Schema, Logger: pgtest.Logger(t)})
	require.NoError(t, err)
	gate := newGateWorker()
	rt := pgtest.StartRuntime(t, db, queue.RuntimeConfig{Middleware: []rivertype.Middleware{coord.Middleware()}}, func(rt *queue.Runtime) {
		registerTestJobs(rt)
		queue.AddWorker(rt, gate)
		require.NoError(t, coord.Register(rt))
		var err error
		_, svc, err = InstallWorker(rt, Config{Addr: "127.0.0.1:0", Token: testToken, Logger: pgtest.Logger(t)})
		require.NoError(t, err)
	})
	ctx := context.Background()
	base := "http://" + svc.Addr()

	// Some history: completed jobs, a job waiting an hour, and a job that
	// fails its first attempt with max attempts 1, so it is discarded; a
	// retry gives it a second attempt, which succeeds.
	var noop int64
	for range 5 {
		res, err := rt.Enqueue(ctx, noopArgs{}, nil)
		require.NoError(t, err)
		noop = res.Job.ID
	}
	_, err = rt.Enqueue(ctx, sleepArgs{MS: 10}, &queue.EnqueueOpts{ScheduledAt: time.Now().Add(time.Hour), Queue: "reports"})
	require.NoError(t, err)
	res, err := rt.Enqueue(ctx, failArgs{Times: 1}, &queue.EnqueueOpts{MaxAttempts: 1})
	require.NoError(t, err)
	failed := res.Job.ID
	// Rows for the other pages' screenshots.
	insertOutboxRow(t, db, "FAILED")
	insertOutboxRow(t, db, "PENDING")
	insertSchedule(t, db, "nightly-report")
	insertBatchRows(t, db)
	// A workflow whose middle task gives up: prepare -> charge -> ship.
	wfc := workflow.NewClient(rt.Client)
	wf := workflow.New("order", &workflow.Opts{ID: "order-42", Attributes: map[string]string{"customer": "c-42"}})
	wf.Add("prepare", noopArgs{}, nil)
	wf.Add("charge", gateArgs{}, &workflow.TaskOpts{Deps: []string{"prepare"}})
	wf.Add("ship", noopArgs{}, &workflow.TaskOpts{Deps: []string{"charge"}})
	wfRes, err := wfc.Insert(ctx, wf)
	require.NoError(t, err)
	db.WaitForJobState(t, noop, rivertype.JobStateCompleted, 10*time.Second)
	db.WaitForJobState(t, failed, rivertype.JobStateDiscarded, 10*time.Second)
	pgtest.WaitFor(t, 10*time.Second, "the workflow to fail", func() (bool, error) {
		s, err := wfc.Summary(ctx, wfRes.ID)
		return err == nil && s.Status == workflow.StatusFailed, err
	})

	b := newBrowser(t)

	// The overview.
	require.NoError(t, chromedp.Do(b, chromedp.Navigate(base+"/"), chromedp.WaitVisible(".card.state-discarded")))
	discarded, err := chromedp.Run(b, chromedp.Text(".card.state-discarded .value"))
	require.NoError(t, err)
	require.Equal(t, "1", strings.TrimSpace(discarded))
	screenshot(t, b, "01-overview")

	// Jobs, filtered by state through the form.
	require.NoError(t, chromedp.Do(b,
		chromedp.Navigate(base+"/jobs"),
		chromedp.WaitVisible("#filter-state"),
	))
	screenshot(t, b, "02-jobs")
	require.NoError(t, chromedp.Do(b,
		chromedp.SetValue("#filter-state", "discarded"),
		chromedp.Click("#filter-apply"),
	))
	// The unfiltered page lists the failed job too: wait for the filtered
	// page to have loaded before looking at it.
	waitForPage(t, b, "state=discarded")
	require.NoError(t, chromedp.Do(b, chromedp.WaitVisible(fmt.Sprintf(`a[href="/jobs/%d"]`, failed))))
	loc, err := chromedp.Run(b, chromedp.Location())
	require.NoError(t, err)
	require.Contains(t, loc, "state=discarded")
	rows, err := chromedp.Run(b, chromedp.Evaluate[int](`document.querySelectorAll("table.jobs tbody tr").length`))
	require.NoError(t, err)
	require.Equal(t, 1, rows, "only the discarded job is listed")
	screenshot(t, b, "03-jobs-discarded")

	// The failed job.
	require.NoError(t, chromedp.Do(b,
		chromedp.Click(fmt.Sprintf(`a[href="/jobs/%d"]`, failed)),
		chromedp.WaitVisible("#job-state"),
	))
	state, err := chromedp.Run(b, chromedp.Text("#job-state"))
	require.NoError(t, err)
	require.Equal(t, "discarded", state)
	errText, err := chromedp.Run(b, chromedp.Text("pre.error"))
	require.NoError(t, err)
	require.Contains(t, errText, "failing on purpose")
	screenshot(t, b, "04-job-discarded")

	// Log in with the token through the form; it returns to the job.
	require.NoError(t, chromedp.Do(b,
		chromedp.Click("#login-link"),
		chromedp.WaitVisible("#token"),
		chromedp.SendKeys("#token", testToken),
	))
	screenshot(t, b, "05-login")
	require.NoError(t, chromedp.Do(b, chromedp.Click("#login-submit")))
	waitForElement(t, b, "#action-retry") // WaitVisible can fail as the login page goes away
	screenshot(t, b, "06-job-logged-in")

	// Retry; the second attempt succeeds and the page shows it.
	require.NoError(t, chromedp.Do(b, chromedp.Click("#action-retry"), chromedp.WaitVisible("#job-state")))
	db.WaitForJobState(t, failed, rivertype.JobStateCompleted, 10*time.Second)
	require.NoError(t, chromedp.Do(b, chromedp.Reload(), chromedp.WaitVisible("#job-state")))
	state, err = chromedp.Run(b, chromedp.Text("#job-state"))
	require.NoError(t, err)
	require.Equal(t, "completed", state)
	screenshot(t, b, "07-job-retried")

	// The other pages render.
	for i, page := range []string{"outbox", "schedules", "batches", "amqp"} {
		require.NoError(t, chromedp.Do(b, chromedp.Navigate(base+"/"+page), chromedp.WaitVisible("main h1")))
		screenshot(t, b, fmt.Sprintf("%02d-%s", 8+i, page))
	}

	// Limits: a declared limit is listed, and its form overrides its max.
	lim, err := limits.New(limits.Config{Schema: db.Schema, Limits: []limits.Limit{{Name: "per-customer", Kind: "sync", KeyArg: "customer_id", Max: 2}}})
	require.NoError(t, err)
	adm := lim.NewAdmitter(rt.Client)
	require.NoError(t, adm.Start(ctx))
	require.NoError(t, adm.Stop(ctx))
	require.NoError(t, chromedp.Do(b,
		chromedp.Navigate(base+"/limits"),
		chromedp.WaitVisible(`input[name="max"]`),
		chromedp.SendKeys(`input[name="max"]`, "5"),
		chromedp.Click(`form[action="/limits/per-customer/max"] button`),
		chromedp.WaitVisible(`small.override`),
		// The other form overrides its total; "reset all" drops both.
		chromedp.SendKeys(`input[name="total"]`, "7"),
		chromedp.Click(`form[action="/limits/per-customer/override"] button[type="submit"]`),
		chromedp.WaitVisible(`button[name="reset"]`)))
	totalText, err := chromedp.Run(b, chromedp.Text("main table tbody tr td:nth-child(2)"))
	require.NoError(t, err)
	require.Contains(t, totalText, "7 over all keys (set; declared none)")
	screenshot(t, b, "16-limits")
	require.NoError(t, chromedp.Do(b,
		chromedp.Click(`button[name="reset"]`),
		chromedp.WaitNotPresent(`small.override`)))

	// Workflows: the failed one is listed; its page draws the graph.
	require.NoError(t, chromedp.Do(b, chromedp.Navigate(base+"/workflows"), chromedp.WaitVisible(`a[href="/workflows/`+wfRes.ID+`"]`)))
	screenshot(t, b, "13-workflows")
	// The attribute filter field: a customer's workflows, with their counts.
	require.NoError(t, chromedp.Do(b,
		chromedp.SendKeys("#filter-attr", "customer=c-41"),
		chromedp.Click("#filter-apply"),
		chromedp.WaitVisible(`input.filter-attr[value="customer=c-41"]`),
	))
	none, err := chromedp.Run(b, chromedp.Evaluate[int](`document.querySelectorAll("a.workflow-link").length`))
	require.NoError(t, err)
	require.Zero(t, none, "no workflow of customer c-41")
	require.NoError(t, chromedp.Do(b, chromedp.Navigate(base+"/workflows"),
		chromedp.SendKeys("#filter-attr", "customer=c-42"),
		chromedp.Click("#filter-apply"),
		chromedp.WaitVisible(`input.filter-attr[value="customer=c-42"]`),
		chromedp.WaitVisible(`a[href="/workflows/`+wfRes.ID+`"]`),
	))
	failedCount, err := chromedp.Run(b, chromedp.Text("#count-failed .value"))
	require.NoError(t, err)
	require.Equal(t, "1", failedCount)
	screenshot(t, b, "13b-workflows-by-attribute")
	require.NoError(t, chromedp.Do(b,
		chromedp.Click(`a[href="/workflows/`+wfRes.ID+`"]`),
		chromedp.WaitVisible("#workflow-graph"),
	))
	graph, err := chromedp.Run(b, chromedp.Evaluate[map[string]string](`Object.fromEntries([...document.querySelectorAll("#workflow-graph g.wf-node")].map(g => [g.dataset.task, g.dataset.state + ":" + g.querySelector("rect").getBBox().width]))`))
	require.NoError(t, err)
	require.Equal(t, map[string]string{"prepare": "completed:150", "charge": "failed:150", "ship": "cancelled:150"}, graph, "one drawn node per task, in its state")
	edges, err := chromedp.Run(b, chromedp.Evaluate[int](`document.querySelectorAll("#workflow-graph path.wf-edge").length`))
	require.NoError(t, err)
	require.Equal(t, 2, edges)
	fill, err := chromedp.Run(b, chromedp.Evaluate[string](`getComputedStyle(document.querySelector('#workflow-graph g[data-task="charge"] rect')).fill`))
	require.NoError(t, err)
	require.Equal(t, "rgb(253, 232, 230)", fill, "a failed node is drawn in the failed colour")
	status, err := chromedp.Run(b, chromedp.Text("#workflow-status"))
	require.NoError(t, err)
	require.Equal(t, "failed", status)
	screenshot(t, b, "14-workflow-failed")

	// Retry it (logged in: the form carries the CSRF token). charge runs
	// again and holds at the gate; ship waits for it.
	gate.open()
	require.NoError(t, chromedp.Do(b,
		chromedp.SetValue("#retry-mode", "failed"),
		chromedp.Click("#action-retry"),
	))
	waitForText(t, b, "#workflow-status", "running")
	select {
	case <-gate.started:
	case <-time.After(15 * time.Second):
		t.Fatal("the retried charge task did not start")
	}
	require.NoError(t, chromedp.Do(b, chromedp.Reload(), chromedp.WaitVisible("#workflow-graph")))
	shipState, err := chromedp.Run(b, chromedp.Text("#task-ship .task-state"))
	require.NoError(t, err)
	require.Equal(t, "pending", shipState)
	waitingOn, err := chromedp.Run(b, chromedp.Text("#task-ship .waiting"))
	require.NoError(t, err)
	require.Equal(t, "waiting on: charge", waitingOn)
	chargeState, err := chromedp.Run(b, chromedp.Evaluate[string](`document.querySelector('#workflow-graph g[data-task="charge"]').dataset.state`))
	require.NoError(t, err)
	require.Equal(t, "active", chargeState)
	screenshot(t, b, "15-workflow-retried")
	close(gate.release)
	pgtest.WaitFor(t, 10*time.Second, "the retried workflow to complete", func() (bool, error) {
		s, err := wfc.Summary(ctx, wfRes.ID)
		return err == nil && s.Status == workflow.StatusCompleted, err
	})
	require.NoError(t, chromedp.Do(b, chromedp.Reload(), chromedp.WaitVisible("#workflow-status")))
	status, err = chromedp.Run(b, chromedp.Text("#workflow-status"))
	require.NoError(t, err)
	require.Equal(t, "completed", status)

	// Log out: back on the job, the actions are gone and the login link is
	// there again.
	require.NoError(t, chromedp.Do(b, chromedp.Click("#logout"), chromedp.WaitVisible(`a[href^="/login"]`)))
	require.NoError(t, chromedp.Do(b, chromedp.Navigate(fmt.Sprintf("%s/jobs/%d", base, failed)), chromedp.WaitVisible("#login-link")))
	actionButtons, err := chromedp.Run(b, chromedp.Evaluate[int](`document.querySelectorAll("#action-retry, #action-cancel, #action-delete").length`))
	require.NoError(t, err)
	require.Zero(t, actionButtons)
	screenshot(t, b, "12-logged-out")
}

// waitForText polls until the element's text is want (a click's
// navigation happens after Click returns).
func waitForText(t *testing.T, b context.Context, sel, want string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		// Errors are expected while the old page goes away.
		got, err := chromedp.Run(b, chromedp.Evaluate[string](`(document.querySelector(`+strconv.Quote(sel)+`) || {}).textContent || ""`))
		if err == nil && strings.TrimSpace(got) == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not show %q (it shows %q, %v)", sel, want, got, err)
		}
		time.Sleep(20 * time.Millisecond) // polling the browser until a deadline
	}
}

// gateArgs is a task that gives up for good (river.JobCancel) until its
// worker's gate opens; then it waits for release and completes.
type gateArgs struct{}

func (gateArgs) Kind() string { return "dashboard_test.gate" }

type gateWorker struct {
	river.WorkerDefaults[gateArgs]
	opened  atomic.Bool
	started chan struct{}
	release chan struct{}
}

func newGateWorker() *gateWorker {
	return &gateWorker{started: make(chan struct{}, 10), release: make(chan struct{})}
}

func (w *gateWorker) open() { w.opened.Store(true) }

func (w *gateWorker) Work(ctx context.Context, job *river.Job[gateArgs]) error {
	if !w.opened.Load() {
		return river.JobCancel(errors.New("the gate is closed"))
	}
	w.started <- struct{}{}
	select {
	case <-w.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// waitForElement polls until a fully loaded page has an element matching
// sel (a click's navigation happens after Click returns).
func waitForElement(t *testing.T, b context.Context, sel string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		// Errors are expected while the old page goes away.
		found, err := chromedp.Run(b, chromedp.Evaluate[bool](`document.readyState === "complete" && document.querySelector(`+strconv.Quote(sel)+`) !== null`))
		if err == nil && found {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no page with %s appeared (%v)", sel, err)
		}
		time.Sleep(20 * time.Millisecond) // polling the browser until a deadline
	}
}

// waitForPage polls until the browser shows a fully loaded page whose
// address contains part (a click's navigation happens after Click returns).
func waitForPage(t *testing.T, b context.Context, part string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		// Errors are expected while the old page goes away.
		loc, err := chromedp.Run(b, chromedp.Location())
		if err == nil && strings.Contains(loc, part) {
			ready, err := chromedp.Run(b, chromedp.Evaluate[string](`document.readyState`))
			if err == nil && ready == "complete" {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the browser did not reach a page with %q in its address (at %q, %v)", part, loc, err)
		}
		time.Sleep(20 * time.Millisecond) // polling the browser until a deadline
	}
}
