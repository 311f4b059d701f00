package dashboard

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/tributary-run/tributary/jobs/workflow"
	"github.com/tributary-run/tributary/queue"
)

// WorkflowFilter selects workflows for the workflows page. Zero fields do
// not filter.
type WorkflowFilter struct {
	Status string `json:"status,omitempty"`
	Name   string `json:"name,omitempty"`
	// Attr keeps workflows with every one of these attributes, each
	// "key=value" (attr= repeated; an empty one is ignored).
	Attr []string `json:"attr,omitempty"`
	// After is the keyset cursor: only workflows older than this one.
	After string `json:"after,omitempty"`
	// Limit is the page size. Defaults to 50, at most 500.
	Limit int `json:"limit"`
}

// ParseWorkflowFilter reads a filter from a query string. An unknown
// status, a cursor that is not a workflow id, a bad limit and a name that
// is too long or not text are errors naming the value.
func ParseWorkflowFilter(v url.Values) (WorkflowFilter, error) {
	f := WorkflowFilter{
		Status: strings.TrimSpace(v.Get("status")),
		Name:   strings.TrimSpace(v.Get("name")),
		After:  strings.TrimSpace(v.Get("after")),
		Limit:  PageSizeDefault,
	}
	if f.Status != "" {
		if _, err := workflow.ParseStatus(f.Status); err != nil {
			return f, badRequestf("%v", err)
		}
	}
	if err := checkText("name", f.Name); err != nil {
		return f, err
	}
	if len(f.Name) > workflow.NameMaxLen {
		return f, badRequestf("invalid name %q: longer than %d characters", truncateUTF8(f.Name, 32)+"...", workflow.NameMaxLen)
	}
	for _, raw := range v["attr"] {
		raw = strings.TrimSpace(raw)
		if raw == "" {
			continue
		}
		if _, _, err := workflow.ParseAttribute(raw); err != nil {
			return f, badRequestf("%v", err)
		}
		f.Attr = append(f.Attr, raw)
	}
	if _, err := f.attributes(); err != nil {
		return f, err
	}
	if f.After != "" {
		if _, err := uuid.Parse(f.After); err != nil {
			return f, badRequestf("invalid cursor after=%q: want a workflow id", truncateUTF8(f.After, 64))
		}
	}
	if raw := strings.TrimSpace(v.Get("limit")); raw != "" {
		n, err := strconv.Atoi(raw)
		if err != nil || n < 1 || n > PageSizeMax {
			return f, badRequestf("invalid limit %q: want 1 to %d", raw, PageSizeMax)
		}
		f.Limit = n
	}
	return f, nil
}

// attributes returns Attr as ListParams.Attributes; a key given twice is
// an error.
func (f WorkflowFilter) attributes() (map[string]string, error) {
	if len(f.Attr) == 0 {
		return nil, nil
	}
	attrs := make(map[string]string, len(f.Attr))
	for _, raw := range f.Attr {
		k, val, err := workflow.ParseAttribute(raw)
		if err != nil {
			return nil, badRequestf("%v", err)
		}
		if _, dup := attrs[k]; dup {
			return nil, badRequestf("invalid attr: key %q given twice", k)
		}
		attrs[k] = val
	}
	return attrs, nil
}

// Query returns the filter as a query string, without the cursor.
func (f WorkflowFilter) Query() url.Values {
	v := url.Values{}
	for _, a := range f.Attr {
		v.Add("attr", a)
	}
	if f.Status != "" {
		v.Set("status", f.Status)
	}
	if f.Name != "" {
		v.Set("name", f.Name)
	}
	if f.Limit != 0 && f.Limit != PageSizeDefault {
		v.Set("limit", strconv.Itoa(f.Limit))
	}
	return v
}

// WorkflowsPage is one page of the workflows list, newest first, with the
// number of workflows per status.
type WorkflowsPage struct {
	notEnabled
	Filter WorkflowFilter `json:"filter"`
	// Counts are the workflows per status, exact up to the count cap.
	Counts    map[string]queue.Count `json:"counts"`
	Workflows []workflow.Summary     `json:"workflows"`
	// Next is the cursor of the next page (after=); empty on the last.
	Next string `json:"next,omitempty"`
}

// workflowIndex is created by the migration that indexed workflows by
// status (0011); a schema without it shows the pages as not enabled, since
// its filters and counts would scan the table.
const workflowIndex = "tributary_workflow_status_idx"

// workflowAttributeIndex is created by the migration of workflow
// attributes (workflow_attribute).
const workflowAttributeIndex = "tributary_workflow_attribute_kv_idx"

const workflowsNotEnabled = "the workflow tables are not in this schema or not migrated (run `tributary migrate up`)"

// workflows returns the workflow client of the dashboard's schema.
func (s *Server) workflows() *workflow.Client { return workflow.NewClient(s.client) }

// ListWorkflows reads one page of workflows matching f and the counts per
// status.
func (s *Server) ListWorkflows(ctx context.Context, f WorkflowFilter) (*WorkflowsPage, error) {
	page := &WorkflowsPage{notEnabled: notEnabled{Feature: "workflows", Enabled: true}, Filter: f,
		Counts: map[string]queue.Count{}, Workflows: []workflow.Summary{}}
	if f.Limit == 0 {
		f.Limit = PageSizeDefault
		page.Filter.Limit = f.Limit
	}
	wfc := s.workflows()
	attrs, err := f.attributes()
	if err != nil {
		return nil, err
	}
	p := workflow.ListParams{Name: f.Name, After: f.After, Limit: f.Limit, Attributes: attrs}
	err = s.readTx(ctx, func(tx pgx.Tx) error {
		ok, err := s.tableExists(ctx, tx, workflowIndex)
		if err != nil || !ok {
			page.Enabled, page.Reason = false, workflowsNotEnabled
			return err
		}
		if len(attrs) > 0 {
			// The counts of the attribute filter: the cards say how
			// the customer's (or order's) workflows stand.
			ok, err := s.tableExists(ctx, tx, workflowAttributeIndex)
			if err != nil || !ok {
				page.Enabled, page.Reason = false, workflowsNotEnabled
				return err
			}
			counts, err := wfc.CountByStatus(ctx, workflow.ListParams{Name: f.Name, Attributes: attrs}, s.cfg.CountCap)
			if err != nil {
				return err
			}
			for st, c := range counts {
				page.Counts[string(st)] = c
			}
			return nil
		}
		counts, err := wfc.StatusCounts(ctx, tx, s.cfg.CountCap)
		if err != nil {
			return err
		}
		for st, c := range counts {
			page.Counts[string(st)] = c
		}
		return nil
	})
	if err != nil || !page.Enabled {
		return page, err
	}
	if f.Status != "" {
		p.Statuses = []workflow.Status{workflow.Status(f.Status)}
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.QueryTimeout)
	defer cancel()
	res, err := wfc.List(ctx, p)
	if err != nil {
		return nil, err
	}
	page.Workflows, page.Next = res.Workflows, res.Next
	return page, nil
}

// workflowsView adds links for the page.
type workflowsView struct {
	*WorkflowsPage
	NextURL string
}

func (s *Server) handleWorkflows(w http.ResponseWriter, r *http.Request) error {
	q, err := pageQuery(r, "status", "name", repeatable("attr"), "after", "limit")
	if err != nil {
		return err
	}
	f, err := ParseWorkflowFilter(q)
	if err != nil {
		return err
	}
	page, err := s.ListWorkflows(r.Context(), f)
	if err != nil {
		return err
	}
	if isAPI(r) {
		return s.render(w, r, "", "", "", page)
	}
	v := workflowsView{WorkflowsPage: page}
	if page.Next != "" {
		q := page.Filter.Query()
		q.Set("after", page.Next)
		v.NextURL = "/workflows?" + q.Encode()
	}
	return s.render(w, r, "workflows", "Workflows", "workflows", v)
}

// WorkflowPage is one workflow with its tasks, as the workflow page and
// /api/workflows/{id} show it.
type WorkflowPage struct {
	*workflow.Details
	// Actions are the actions that apply to the workflow in its status.
	Actions []string `json:"actions"`
	// RetryModes are the modes a retry takes.
	RetryModes []workflow.RetryMode `json:"retry_modes"`
}

// workflowView adds the graph and the task table's page for the page.
type workflowView struct {
	*WorkflowPage
	Graph *taskGraph
	// Shown are the tasks the table lists: taskTablePage of them from the
	// Offset-th on, in position order.
	Shown []workflow.TaskInfo
	// First and Last number the shown tasks from 1.
	First, Last int
	// PrevURL and NextURL are the table's neighbouring pages, if any.
	PrevURL, NextURL string
}

// taskTablePage is the task table's page size: the page reads and renders
// at most that many tasks, so its cost does not grow with the workflow's
// width; the JSON API has every task.
const taskTablePage = 100

// GetWorkflow reads a workflow by id or key with every task.
func (s *Server) GetWorkflow(ctx context.Context, ref string) (*WorkflowPage, error) {
	return s.getWorkflow(ctx, ref, func(ctx context.Context, wfc *workflow.Client) (*workflow.Details, error) {
		return wfc.Get(ctx, ref)
	})
}

// getWorkflow reads a workflow with read and adds its actions.
func (s *Server) getWorkflow(ctx context.Context, ref string, read func(context.Context, *workflow.Client) (*workflow.Details, error)) (*WorkflowPage, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.QueryTimeout)
	defer cancel()
	if ok, err := s.tableExists(ctx, s.pool, "tributary_workflow"); err != nil {
		return nil, err
	} else if !ok {
		return nil, notFoundf("workflows are not enabled: %s", workflowsNotEnabled)
	}
	d, err := read(ctx, s.workflows())
	var nf *workflow.NotFoundError
	if errors.As(err, &nf) {
		return nil, notFoundf("%v", err)
	}
	if err != nil {
		return nil, err
	}
	p := &WorkflowPage{Details: d, Actions: []string{"retry"}, RetryModes: workflow.RetryModes()}
	if d.Status == workflow.StatusRunning {
		p.Actions = []string{"cancel", "retry"}
	}
	return p, nil
}

func parseWorkflowRef(raw string) (string, error) {
	if strings.TrimSpace(raw) == "" {
		return "", badRequestf("the workflow id is empty")
	}
	if err := checkText("workflow id", raw); err != nil {
		return "", err
	}
	if len(raw) > workflow.NameMaxLen {
		return "", badRequestf("invalid workflow id %q: longer than %d characters", truncateUTF8(raw, 32)+"...", workflow.NameMaxLen)
	}
	return raw, nil
}

// GetWorkflowTasks reads a workflow by id or key with limit of its tasks
// after the first offset (workflow.Client.GetTaskPage).
func (s *Server) GetWorkflowTasks(ctx context.Context, ref string, offset, limit int) (*WorkflowPage, error) {
	return s.getWorkflow(ctx, ref, func(ctx context.Context, wfc *workflow.Client) (*workflow.Details, error) {
		return wfc.GetTaskPage(ctx, ref, offset, limit)
	})
}

// parseTaskOffset reads the workflow page's tasks= parameter: how many
// tasks the table's page skips.
func parseTaskOffset(q url.Values) (int, error) {
	raw := strings.TrimSpace(q.Get("tasks"))
	if raw == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(raw)
	if err != nil || n < 0 {
		return 0, badRequestf("invalid tasks=%q: want the number of tasks to skip, 0 or more", truncateUTF8(raw, 64))
	}
	return n, nil
}

func (s *Server) handleWorkflow(w http.ResponseWriter, r *http.Request) error {
	q, err := pageQuery(r, "tasks")
	if err != nil {
		return err
	}
	ref, err := parseWorkflowRef(r.PathValue("id"))
	if err != nil {
		return err
	}
	if isAPI(r) {
		if q.Has("tasks") {
			return badRequestf("unknown parameter %q: the JSON API has every task", "tasks")
		}
		page, err := s.GetWorkflow(r.Context(), ref)
		if err != nil {
			return err
		}
		return s.render(w, r, "", "", "", page)
	}
	offset, err := parseTaskOffset(q)
	if err != nil {
		return err
	}
	page, err := s.GetWorkflowTasks(r.Context(), ref, offset, taskTablePage)
	if err != nil {
		return err
	}
	v := workflowView{WorkflowPage: page, Shown: page.Tasks, First: offset + 1, Last: offset + len(page.Tasks)}
	if page.TaskCount <= GraphMaxTasks {
		// The graph needs every task: at most GraphMaxTasks of them.
		all := page
		if len(page.Tasks) < page.TaskCount {
			if all, err = s.GetWorkflow(r.Context(), ref); err != nil {
				return err
			}
		}
		g := layoutGraph(all.Tasks)
		linkNodes(&g, all.Tasks, offset, "/workflows/"+url.PathEscape(ref))
		v.Graph = &g
	}
	base := "/workflows/" + url.PathEscape(ref)
	if offset > 0 {
		v.PrevURL = base
		if prev := offset - taskTablePage; prev > 0 {
			v.PrevURL += "?tasks=" + strconv.Itoa(prev)
		}
	}
	if next := offset + taskTablePage; next < page.TaskCount {
		v.NextURL = base + "?tasks=" + strconv.Itoa(next)
	}
	title := "Workflow " + page.Name
	return s.render(w, r, "workflow", title, "workflows", v)
}

// linkNodes points each node of g at its task's row: on the page shown
// (from offset) or on the page of taskTablePage rows that holds it; tasks
// are the workflow's, in the table's position order.
func linkNodes(g *taskGraph, tasks []workflow.TaskInfo, offset int, base string) {
	pos := make(map[string]int, len(tasks))
	for i, t := range tasks {
		pos[t.Name] = i
	}
	for i := range g.Nodes {
		n := &g.Nodes[i]
		href := ""
		if p := pos[n.Name]; p < offset || p >= offset+taskTablePage {
			href = base
			if start := p / taskTablePage * taskTablePage; start > 0 {
				href += "?tasks=" + strconv.Itoa(start)
			}
		}
		n.Href = href + "#task-" + n.Name
	}
}

// workflowActionResult is the JSON answer of a workflow action.
type workflowActionResult struct {
	Action string                 `json:"action"`
	Cancel *workflow.CancelResult `json:"cancel,omitempty"`
	Retry  *workflow.RetryResult  `json:"retry,omitempty"`
}

// WorkflowAction cancels a workflow or retries it with mode (retry only;
// empty means failed).
func (s *Server) WorkflowAction(ctx context.Context, ref, action, mode string) (*workflowActionResult, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.QueryTimeout)
	defer cancel()
	wfc := s.workflows()
	res := &workflowActionResult{Action: action}
	var err error
	switch action {
	case "cancel":
		if mode != "" {
			return nil, badRequestf("cancel takes no mode (got %q)", mode)
		}
		res.Cancel, err = wfc.Cancel(ctx, ref)
	case "retry":
		m := workflow.RetryFailed
		if mode != "" {
			if m, err = workflow.ParseRetryMode(mode); err != nil {
				return nil, badRequestf("%v", err)
			}
		}
		res.Retry, err = wfc.Retry(ctx, ref, m)
	default:
		return nil, notFoundf("unknown workflow action %q: want cancel or retry", action)
	}
	var nf *workflow.NotFoundError
	switch {
	case errors.As(err, &nf):
		return nil, notFoundf("%v", err)
	case errors.Is(err, workflow.ErrFinished), errors.Is(err, workflow.ErrNothingToRetry), errors.Is(err, workflow.ErrTaskActive):
		return nil, &httpError{status: http.StatusConflict, msg: err.Error()}
	case err != nil:
		return nil, fmt.Errorf("error running %s on workflow %q: %w", action, ref, err)
	}
	return res, nil
}

func (s *Server) handleWorkflowAction(w http.ResponseWriter, r *http.Request) error {
	ref, err := parseWorkflowRef(r.PathValue("id"))
	if err != nil {
		return err
	}
	action := r.PathValue("action")
	mode := strings.TrimSpace(r.Form.Get("mode"))
	if err := checkText("mode", mode); err != nil {
		return err
	}
	res, err := s.WorkflowAction(r.Context(), ref, action, mode)
	if err != nil {
		return err
	}
	id := ref
	switch {
	case res.Cancel != nil:
		id = res.Cancel.ID
	case res.Retry != nil:
		id = res.Retry.ID
	}
	s.logger.InfoContext(r.Context(), "dashboard workflow action", "action", action, "workflow_id", id, "mode", mode)
	if isAPI(r) {
		writeJSON(w, http.StatusOK, res)
		return nil
	}
	http.Redirect(w, r, "/workflows/"+url.PathEscape(id), http.StatusSeeOther)
	return nil
}
