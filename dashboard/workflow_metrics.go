package dashboard

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tributary-run/tributary/jobs/workflow"
	"github.com/tributary-run/tributary/queue"
)

// workflowDescs are the dashboard's workflow gauges, read from the
// workflow rows with the job counts (metricsCounts).
type workflowDescs struct {
	workflows *prometheus.Desc
	tasks     *prometheus.Desc
	capped    *prometheus.Desc
}

func newWorkflowDescs() workflowDescs {
	return workflowDescs{
		workflows: prometheus.NewDesc("tributary_workflows", "Stored workflows per status (exact up to the count cap, the planner's estimate above it).", []string{"status"}, nil),
		tasks:     prometheus.NewDesc("tributary_workflows_running_tasks", "Tasks of running workflows per state, summed from the counts on the workflow rows (the newest count-cap running workflows).", []string{"state"}, nil),
		capped:    prometheus.NewDesc("tributary_workflows_running_tasks_capped", "1 when there were more running workflows than the count cap, so tributary_workflows_running_tasks leaves the older ones out.", nil, nil),
	}
}

func (d workflowDescs) describe(ch chan<- *prometheus.Desc) {
	ch <- d.workflows
	ch <- d.tasks
	ch <- d.capped
}

// workflowCounts are the workflow gauges' values, read with the job
// counts (metricsCounts); Enabled is false in a schema without the
// workflow tables, which emits none.
type workflowCounts struct {
	Enabled bool
	Status  map[workflow.Status]queue.Count
	Tasks   workflow.Counts
	Capped  bool
}

func (s *Server) readWorkflowCounts(ctx context.Context, tx pgx.Tx) (workflowCounts, error) {
	var wc workflowCounts
	ok, err := s.tableExists(ctx, tx, workflowIndex)
	if err != nil || !ok {
		return wc, err
	}
	wfc := s.workflows()
	if wc.Status, err = wfc.StatusCounts(ctx, tx, s.cfg.CountCap); err != nil {
		return wc, err
	}
	if wc.Tasks, wc.Capped, err = wfc.RunningTaskCounts(ctx, tx, s.cfg.CountCap); err != nil {
		return wc, err
	}
	wc.Enabled = true
	return wc, nil
}

// emit sends the workflow gauges of wc.
func (d workflowDescs) emit(ch chan<- prometheus.Metric, wc workflowCounts) {
	if !wc.Enabled {
		return
	}
	for _, st := range workflow.Statuses() {
		ch <- prometheus.MustNewConstMetric(d.workflows, prometheus.GaugeValue, float64(wc.Status[st].N), string(st))
	}
	tasks := wc.Tasks
	for _, p := range []struct {
		state workflow.TaskState
		n     int
	}{{workflow.TaskPending, tasks.Pending}, {workflow.TaskActive, tasks.Active}, {workflow.TaskCompleted, tasks.Completed},
		{workflow.TaskFailed, tasks.Failed}, {workflow.TaskCancelled, tasks.Cancelled}, {workflow.TaskSkipped, tasks.Skipped}} {
		ch <- prometheus.MustNewConstMetric(d.tasks, prometheus.GaugeValue, float64(p.n), string(p.state))
	}
	cappedValue := 0.0
	if wc.Capped {
		cappedValue = 1
	}
	ch <- prometheus.MustNewConstMetric(d.capped, prometheus.GaugeValue, cappedValue)
}

// WorkflowCollector exports a workflow Coordinator's counters (its Stats)
// for the dashboard's /metrics: what this process recorded of the workflow
// tasks it worked. Add it with Config.Collectors.
type WorkflowCollector struct {
	coord    *workflow.Coordinator
	outcomes *prometheus.Desc
	repaired *prometheus.Desc
	batches  *prometheus.Desc
}

// NewWorkflowCollector returns a collector of coord's counters.
func NewWorkflowCollector(coord *workflow.Coordinator) *WorkflowCollector {
	return &WorkflowCollector{
		coord:    coord,
		outcomes: prometheus.NewDesc("tributary_workflows_task_outcomes_total", "Workflow task outcomes this process recorded: completed, failed, cancelled (remotely), stale (dropped: the job had moved on).", []string{"outcome"}, nil),
		repaired: prometheus.NewDesc("tributary_workflows_repaired_tasks_total", "Workflow tasks this process's repair sweep changed (by construction none).", nil, nil),
		batches:  prometheus.NewDesc("tributary_workflows_completion_batches_total", "Completion transactions this process's workflow coordinator committed.", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *WorkflowCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.outcomes
	ch <- c.repaired
	ch <- c.batches
}

// Collect implements prometheus.Collector.
func (c *WorkflowCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.coord.Stats()
	for _, o := range []struct {
		name string
		n    int64
	}{{"completed", st.Completed}, {"failed", st.Failed}, {"cancelled", st.Cancelled}, {"stale", st.Stale}} {
		ch <- prometheus.MustNewConstMetric(c.outcomes, prometheus.CounterValue, float64(o.n), o.name)
	}
	ch <- prometheus.MustNewConstMetric(c.repaired, prometheus.CounterValue, float64(st.Repaired))
	ch <- prometheus.MustNewConstMetric(c.batches, prometheus.CounterValue, float64(st.Batches))
}
