package dashboard

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/jobs/workflow"
	"github.com/tributary-run/tributary/queue"
)

type workflowBundle struct {
	db    *pgtest.DB
	rt    *queue.Runtime
	wfc   *workflow.Client
	reg   *workflow.Registry
	coord *workflow.Coordinator
	base  string
}

// setupWorkflows starts a runtime with the workflow coordinator, the test
// workflows' workers and the dashboard (with the coordinator's collector).
func setupWorkflows(t *testing.T, cfg Config) *workflowBundle {
	t.Helper()
	db := pgtest.New(t)
	coord, err := workflow.NewCoordinator(db.Pool, workflow.CoordinatorConfig{Schema: db.Schema, Logger: pgtest.Logger(t)})
	require.NoError(t, err)
	var svc *Service
	cfg.Addr, cfg.Logger = "127.0.0.1:0", pgtest.Logger(t)
	cfg.Collectors = append(cfg.Collectors, NewWorkflowCollector(coord))
	rt := pgtest.StartRuntime(t, db, queue.RuntimeConfig{Middleware: []rivertype.Middleware{coord.Middleware()}}, func(rt *queue.Runtime) {
		registerTestJobs(rt)
		registerTestWorkflows(rt)
		require.NoError(t, coord.Register(rt))
		var err error
		_, svc, err = InstallWorker(rt, cfg)
		require.NoError(t, err)
	})
	reg, err := newTestWorkflowRegistry()
	require.NoError(t, err)
	return &workflowBundle{db: db, rt: rt, wfc: workflow.NewClient(rt.Client), reg: reg, coord: coord, base: "http://" + svc.Addr()}
}

func (b *workflowBundle) start(t *testing.T, name, input string, opts *workflow.Opts) string {
	t.Helper()
	res, err := b.wfc.Start(context.Background(), b.reg, name, json.RawMessage(input), opts)
	require.NoError(t, err)
	return res.ID
}

func (b *workflowBundle) waitStatus(t *testing.T, id string, status workflow.Status) *workflow.Details {
	t.Helper()
	var d *workflow.Details
	pgtest.WaitFor(t, 30*time.Second, fmt.Sprintf("workflow %s to be %s", id, status), func() (bool, error) {
		var err error
		d, err = b.wfc.Get(context.Background(), id)
		return err == nil && d.Status == status, err
	})
	return d
}

func TestWorkflowPagesAndAPI(t *testing.T) {
	t.Parallel()
	b := setupWorkflows(t, Config{Token: testToken})
	failed := b.start(t, fanoutName, `{"width":3,"fail":1}`, &workflow.Opts{ID: "fan-1"})
	completed := b.start(t, chainName, `{"length":3}`, nil)
	b.waitStatus(t, failed, workflow.StatusFailed)
	b.waitStatus(t, completed, workflow.StatusCompleted)

	t.Run("List", func(t *testing.T) {
		res := get(t, b.base, "/api/workflows")
		require.Equal(t, 200, res.status, res.body)
		var page WorkflowsPage
		res.json(t, &page)
		require.True(t, page.Enabled)
		require.Len(t, page.Workflows, 2)
		require.Equal(t, completed, page.Workflows[0].ID, "newest first")
		require.EqualValues(t, 1, page.Counts["failed"].N)
		require.EqualValues(t, 1, page.Counts["completed"].N)
		require.EqualValues(t, 0, page.Counts["running"].N)

		res = get(t, b.base, "/api/workflows?status=failed")
		require.Equal(t, 200, res.status, res.body)
		res.json(t, &page)
		require.Len(t, page.Workflows, 1)
		require.Equal(t, failed, page.Workflows[0].ID)
		require.Equal(t, workflow.Counts{Completed: 4, Failed: 1}, page.Workflows[0].Counts)

		res = get(t, b.base, "/api/workflows?name=test.chain")
		res.json(t, &page)
		require.Len(t, page.Workflows, 1)
		require.Equal(t, completed, page.Workflows[0].ID)

		// Pages: one a page, the cursor continues.
		res = get(t, b.base, "/api/workflows?limit=1")
		res.json(t, &page)
		require.Len(t, page.Workflows, 1)
		require.Equal(t, completed, page.Next)
		res = get(t, b.base, "/api/workflows?limit=1&after="+page.Next)
		page = WorkflowsPage{}
		res.json(t, &page)
		require.Len(t, page.Workflows, 1)
		require.Equal(t, failed, page.Workflows[0].ID)
		require.Empty(t, page.Next)

		html := get(t, b.base, "/workflows")
		require.Equal(t, 200, html.status)
		require.Contains(t, html.body, `href="/workflows/`+failed+`"`)
		require.Contains(t, html.body, `id="count-failed"`)
		html = get(t, b.base, "/workflows?limit=1")
		require.Contains(t, html.body, `/workflows?after=`+completed+`&amp;limit=1`)
	})

	t.Run("BadFilters", func(t *testing.T) {
		for _, tc := range []struct{ query, mention string }{
			{"status=sleeping", `"sleeping"`},
			{"after=nope", `"nope"`},
			{"limit=0", `"0"`},
			{"limit=501", `"501"`},
			{"name=" + url.QueryEscape("a\x01b"), "control character"},
			{"name=" + strings.Repeat("n", 201), "longer than 200"},
			{"state=failed", `"state"`},
		} {
			res := get(t, b.base, "/api/workflows?"+tc.query)
			require.Equal(t, 400, res.status, tc.query)
			require.Contains(t, apiError(t, res), tc.mention, tc.query)
			res = get(t, b.base, "/workflows?"+tc.query)
			require.Equal(t, 400, res.status, tc.query)
		}
	})

	t.Run("Workflow", func(t *testing.T) {
		for _, ref := range []string{failed, "fan-1"} {
			res := get(t, b.base, "/api/workflows/"+url.PathEscape(ref))
			require.Equal(t, 200, res.status, res.body)
			var page WorkflowPage
			res.json(t, &page)
			require.Equal(t, failed, page.ID)
			require.Len(t, page.Tasks, 5)
			require.Equal(t, []string{"retry"}, page.Actions)
		}
		res := get(t, b.base, "/api/workflows/no-such-key")
		require.Equal(t, 404, res.status)
		require.Contains(t, apiError(t, res), `"no-such-key"`)

		html := get(t, b.base, "/workflows/"+failed)
		require.Equal(t, 200, html.status, html.body)
		require.Contains(t, html.body, `<svg class="wf-graph"`)
		nodes := regexp.MustCompile(`<g class="wf-node task-(\w+)" data-task="([^"]+)"`).FindAllStringSubmatch(html.body, -1)
		got := map[string]string{}
		for _, m := range nodes {
			got[m[2]] = m[1]
		}
		require.Equal(t, map[string]string{"split": "completed", "part-1": "completed", "part-2": "completed", "part-3": "failed", "sum": "completed"}, got)
		require.Len(t, regexp.MustCompile(`class="wf-edge`).FindAllString(html.body, -1), 6, "split to three parts, three parts to sum")
		require.Contains(t, html.body, "test.fanout part fails on purpose")
		require.Contains(t, html.body, `{&#34;sum&#34;: 3,`, "the fan-in's output")
	})

	t.Run("Actions", func(t *testing.T) {
		path := "/api/workflows/" + failed + "/retry"
		require.Equal(t, 401, post(t, b.base, path, nil).status)
		bearer := []string{"Authorization", "Bearer " + testToken}
		res := post(t, b.base, path, url.Values{"mode": {"sideways"}}, bearer...)
		require.Equal(t, 400, res.status)
		require.Contains(t, apiError(t, res), `"sideways"`)
		res = post(t, b.base, "/api/workflows/"+failed+"/cancel", nil, bearer...)
		require.Equal(t, 409, res.status, "a finished workflow is not cancelled")
		require.Contains(t, res.body, "already finished")
		res = post(t, b.base, "/api/workflows/"+failed+"/pause", nil, bearer...)
		require.Equal(t, 404, res.status)
		require.Contains(t, apiError(t, res), `"pause"`)

		res = post(t, b.base, path, url.Values{"mode": {"failed-and-downstream"}}, bearer...)
		require.Equal(t, 200, res.status, res.body)
		var out workflowActionResult
		res.json(t, &out)
		require.ElementsMatch(t, []string{"part-3", "sum"}, out.Retry.Tasks)
		// part-3 fails again; the sum runs again after it.
		d := b.waitStatus(t, failed, workflow.StatusFailed)
		for _, task := range d.Tasks {
			if task.Name == "sum" {
				require.Equal(t, 2, task.Run)
			}
		}

		// The form redirects to the workflow page.
		res = post(t, b.base, "/workflows/fan-1/retry", url.Values{"mode": {"failed"}}, bearer...)
		require.Equal(t, 303, res.status, res.body)
		require.Equal(t, "/workflows/"+failed, res.header.Get("Location"))
	})
}

// apiError returns the message of a JSON error answer.
func apiError(t *testing.T, res response) string {
	t.Helper()
	var e struct {
		Error string `json:"error"`
	}
	res.json(t, &e)
	require.NotEmpty(t, e.Error, res.body)
	return e.Error
}

func TestWorkflowPageWithoutWorkflowTables(t *testing.T) {
	t.Parallel()
	_, bundle := setupServer(t, Config{})
	_, err := bundle.db.Pool.Exec(context.Background(), bundle.db.Q(`DROP INDEX /*schema*/tributary_workflow_status_idx`))
	require.NoError(t, err)
	res := get(t, bundle.http.URL, "/api/workflows")
	require.Equal(t, 200, res.status, res.body)
	var page WorkflowsPage
	res.json(t, &page)
	require.False(t, page.Enabled)
	require.Contains(t, get(t, bundle.http.URL, "/workflows").body, "Not enabled")
}

func TestLayoutGraph(t *testing.T) {
	t.Parallel()
	task := func(name string, deps ...string) workflow.TaskInfo {
		return workflow.TaskInfo{Name: name, Deps: deps, State: workflow.TaskPending}
	}
	// Added out of order: the layout follows dependencies, not positions.
	g := layoutGraph([]workflow.TaskInfo{task("d", "b", "c"), task("b", "a"), task("a"), task("c", "a"), task("e")})
	at := map[string]graphNode{}
	for _, n := range g.Nodes {
		at[n.Name] = n
	}
	require.Len(t, at, 5)
	require.Less(t, at["a"].X, at["b"].X)
	require.Equal(t, at["b"].X, at["c"].X)
	require.Less(t, at["b"].X, at["d"].X)
	require.Equal(t, at["a"].X, at["e"].X, "a task without dependencies is in the first layer")
	require.NotEqual(t, at["b"].Y, at["c"].Y)
	require.Len(t, g.Edges, 4)
	for _, e := range g.Edges {
		require.Less(t, at[e.From].X, at[e.To].X, "edge %s -> %s points right", e.From, e.To)
	}
	for _, n := range g.Nodes {
		require.LessOrEqual(t, n.X+graphNodeW, g.Width)
		require.LessOrEqual(t, n.Y+graphNodeH, g.Height)
		for _, o := range g.Nodes {
			if o.Name != n.Name {
				require.False(t, n.X == o.X && n.Y == o.Y, "%s and %s overlap", n.Name, o.Name)
			}
		}
	}
}

func TestWorkflowPageShowsWhatATaskWaitsFor(t *testing.T) {
	t.Parallel()
	b := setupWorkflows(t, Config{Token: testToken})
	id := b.start(t, approvalName, `{"timeout":"1h"}`, nil)
	pgtest.WaitFor(t, 30*time.Second, "the approval task to wait for its signal", func() (bool, error) {
		d, err := b.wfc.Get(context.Background(), id)
		if err != nil {
			return false, err
		}
		w := taskOf(t, d, "approval").WaitingFor
		return w != nil && w.Kind == "signal", nil
	})

	html := get(t, b.base, "/workflows/"+id)
	require.Equal(t, 200, html.status, html.body)
	require.Contains(t, html.body, `waits for signal &ldquo;approve&rdquo; until `)
	require.Regexp(t, `steps recorded: [1-9]`, html.body, "the step before the wait")

	res := get(t, b.base, "/api/workflows/"+id)
	require.Equal(t, 200, res.status, res.body)
	var d workflow.Details
	res.json(t, &d)
	w := taskOf(t, &d, "approval").WaitingFor
	require.NotNil(t, w)
	require.Equal(t, "approve", w.Name)
	require.NotNil(t, w.Until, "a wait with a timeout has a deadline")
}

func taskOf(t *testing.T, d *workflow.Details, name string) workflow.TaskInfo {
	t.Helper()
	for _, task := range d.Tasks {
		if task.Name == name {
			return task
		}
	}
	t.Fatalf("workflow %s has no task %q", d.ID, name)
	return workflow.TaskInfo{}
}

// TestWorkflowPageTaskTablePages checks that the workflow page lists a
// wide workflow's tasks a page at a time (taskTablePage), with links to the
// neighbouring pages, while the graph still has every task and a task off
// the page still shows what it waits on.
func TestWorkflowPageTaskTablePages(t *testing.T) {
	t.Parallel()
	b := setupWorkflows(t, Config{})
	const width = 2*taskTablePage + 50
	wf := workflow.New("wide", nil)
	wf.Add("root", noopArgs{}, &workflow.TaskOpts{InsertOpts: idleOpts()})
	for i := range width {
		wf.Add(fmt.Sprintf("leaf-%03d", i), noopArgs{}, &workflow.TaskOpts{Deps: []string{"root"}, InsertOpts: idleOpts()})
	}
	res, err := b.wfc.Insert(context.Background(), wf)
	require.NoError(t, err)
	id := res.ID
	rows := func(body string) int { return strings.Count(body, `<tr id="task-`) }

	first := get(t, b.base, "/workflows/"+id)
	require.Equal(t, 200, first.status, first.body)
	require.Equal(t, taskTablePage, rows(first.body), "the first page of the table")
	require.Contains(t, first.body, `id="task-root"`)
	require.Contains(t, first.body, fmt.Sprintf(`href="/workflows/%s?tasks=%d"`, id, taskTablePage))
	require.NotContains(t, first.body, `id="tasks-prev"`)
	require.Equal(t, width+1, strings.Count(first.body, `class="wf-node `), "the graph has every task")
	require.Contains(t, first.body, `<a href="#task-leaf-000">`, "a node on this page links to its row")
	require.Contains(t, first.body, fmt.Sprintf(`<a href="/workflows/%s?tasks=%d#task-leaf-%03d">`, id, 2*taskTablePage, width-1), "a node on a later page links to it")

	last := get(t, b.base, fmt.Sprintf("/workflows/%s?tasks=%d", id, 2*taskTablePage))
	require.Equal(t, 200, last.status, last.body)
	require.Equal(t, width+1-2*taskTablePage, rows(last.body))
	require.Contains(t, last.body, fmt.Sprintf(`id="task-leaf-%03d"`, width-1))
	require.NotContains(t, last.body, `id="task-root"`)
	require.Contains(t, last.body, "waiting on: root", "the dependency is not on this page")
	require.Contains(t, last.body, fmt.Sprintf(`href="/workflows/%s?tasks=%d"`, id, taskTablePage))
	require.NotContains(t, last.body, `id="tasks-next"`)

	for _, tc := range []struct{ path, mention string }{
		{"/workflows/" + id + "?tasks=-1", `invalid tasks=&#34;-1&#34;`},
		{"/workflows/" + id + "?tasks=x", `invalid tasks=&#34;x&#34;`},
		{"/api/workflows/" + id + "?tasks=100", `the JSON API has every task`},
	} {
		res := get(t, b.base, tc.path)
		require.Equal(t, 400, res.status, tc.path)
		require.Contains(t, res.body, tc.mention, tc.path)
	}
	api := get(t, b.base, "/api/workflows/"+id)
	require.Equal(t, 200, api.status, api.body)
	var d workflow.Details
	api.json(t, &d)
	require.Len(t, d.Tasks, width+1, "the JSON API has every task")
}
