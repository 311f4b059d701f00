package dashboard

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tributary-run/tributary/jobs/batch"
	"github.com/tributary-run/tributary/jobs/events"
	"github.com/tributary-run/tributary/queue"
)

// dbCollector reads gauges from the database: jobs per state, live jobs
// per queue, the oldest available job's age per queue and the workflows
// per status with the tasks of running ones per state from one read shared
// by the scrapes (metricsCounts: the overview's capped counts, whose cost
// grows with the tables up to the count cap, kept with their age), the
// outbox backlog and forward lag, the batch tables and the event
// consumers' blocked lanes at scrape time, and their pending dispatches
// as last counted.
type dbCollector struct {
	s *Server

	jobs         *prometheus.Desc
	queueJobs    *prometheus.Desc
	oldestAge    *prometheus.Desc
	outboxRows   *prometheus.Desc
	outboxLag    *prometheus.Desc
	stagedItems  *prometheus.Desc
	stagedBytes  *prometheus.Desc
	objects      *prometheus.Desc
	objectBytes  *prometheus.Desc
	objectGzip   *prometheus.Desc
	blockedLanes *prometheus.Desc
	pendingDisp  *prometheus.Desc
	pendingAge   *prometheus.Desc
	countsAge    *prometheus.Desc
	scrapeErrors *prometheus.Desc
	wf           workflowDescs
}

func newDBCollector(s *Server) *dbCollector {
	return &dbCollector{
		s:            s,
		jobs:         prometheus.NewDesc("tributary_jobs", "Jobs per state (exact up to the count cap, the planner's estimate above it).", []string{"state"}, nil),
		queueJobs:    prometheus.NewDesc("tributary_queue_jobs", "Live jobs (available, running, retryable, scheduled, pending) per queue and state: the queue depth.", []string{"queue", "state"}, nil),
		oldestAge:    prometheus.NewDesc("tributary_queue_oldest_available_age_seconds", "How long the longest-waiting available job of a queue has waited.", []string{"queue"}, nil),
		outboxRows:   prometheus.NewDesc("tributary_outbox_rows", "Outbox rows per status; PENDING plus CLAIMED is the backlog.", []string{"status"}, nil),
		outboxLag:    prometheus.NewDesc("tributary_outbox_forward_lag_seconds", "Age of the oldest outbox row waiting to be forwarded (0 when none waits).", nil, nil),
		stagedItems:  prometheus.NewDesc("tributary_batch_staged_items", "Items staged per stream, waiting for a flush.", []string{"stream"}, nil),
		stagedBytes:  prometheus.NewDesc("tributary_batch_staged_bytes", "Bytes staged per stream, waiting for a flush.", []string{"stream"}, nil),
		objects:      prometheus.NewDesc("tributary_batch_objects", "Batch objects written per stream (records kept by retention).", []string{"stream"}, nil),
		objectBytes:  prometheus.NewDesc("tributary_batch_object_bytes", "Uncompressed bytes of the written batch objects per stream.", []string{"stream"}, nil),
		objectGzip:   prometheus.NewDesc("tributary_batch_object_compressed_bytes", "Compressed bytes of the written batch objects per stream.", []string{"stream"}, nil),
		blockedLanes: prometheus.NewDesc("tributary_event_lanes_blocked", "Aggregates of an event consumer held by a given-up head event (lane blocks), per consumer.", []string{"consumer"}, nil),
		pendingDisp:  prometheus.NewDesc("tributary_event_consumer_pending_dispatches", "Unfinished dispatch jobs of an event consumer (a batched dispatch counts once), per consumer, as of the count tributary_event_consumer_pending_dispatches_age_seconds ago.", []string{"consumer"}, nil),
		pendingAge:   prometheus.NewDesc("tributary_event_consumer_pending_dispatches_age_seconds", "How long ago the pending dispatches were counted (recounted in the background once older than the dashboard's PendingDispatchesMaxAge).", nil, nil),
		countsAge:    prometheus.NewDesc("tributary_dashboard_counts_age_seconds", "How long ago the job and workflow counts (tributary_jobs, tributary_queue_jobs, tributary_queue_oldest_available_age_seconds, tributary_workflows, tributary_workflows_running_tasks*) were read: one read is shared by the scrapes, re-read in the background once older than the dashboard's MetricsCountsMaxAge.", nil, nil),
		scrapeErrors: prometheus.NewDesc("tributary_dashboard_scrape_error", "1 when the last scrape could not read the database.", nil, nil),
		wf:           newWorkflowDescs(),
	}
}

func (c *dbCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.jobs, c.queueJobs, c.oldestAge, c.outboxRows, c.outboxLag,
		c.stagedItems, c.stagedBytes, c.objects, c.objectBytes, c.objectGzip, c.blockedLanes, c.pendingDisp, c.pendingAge, c.countsAge, c.scrapeErrors} {
		ch <- d
	}
	c.wf.describe(ch)
}

func (c *dbCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.s.cfg.QueryTimeout)
	defer cancel()
	failed := 0.0
	if mc, takenAt, err := c.s.counts.get(ctx); err != nil {
		c.s.logger.WarnContext(ctx, "metrics scrape could not read the job and workflow counts", "error", err)
		failed = 1
	} else {
		for _, sc := range mc.Jobs.States {
			ch <- prometheus.MustNewConstMetric(c.jobs, prometheus.GaugeValue, float64(sc.N), sc.State)
		}
		for _, q := range mc.Jobs.Queues {
			for _, state := range queue.LiveJobStates() {
				ch <- prometheus.MustNewConstMetric(c.queueJobs, prometheus.GaugeValue, float64(q.States[state].N), q.Queue, state)
			}
			ch <- prometheus.MustNewConstMetric(c.oldestAge, prometheus.GaugeValue, q.OldestAvailableAgeSeconds, q.Queue)
		}
		c.wf.emit(ch, mc.Workflows)
		ch <- prometheus.MustNewConstMetric(c.countsAge, prometheus.GaugeValue, time.Since(takenAt).Seconds())
	}
	var err error
	var ob *OutboxPage
	err = c.s.readTx(ctx, func(tx pgx.Tx) error {
		var err error
		ob, err = c.s.outboxSummary(ctx, tx)
		return err
	})
	if err != nil {
		c.s.logger.WarnContext(ctx, "metrics scrape could not read the outbox", "error", err)
		failed = 1
	} else if ob.Enabled {
		for _, st := range events.Statuses() {
			ch <- prometheus.MustNewConstMetric(c.outboxRows, prometheus.GaugeValue, float64(ob.Counts[st].N), st)
		}
		ch <- prometheus.MustNewConstMetric(c.outboxLag, prometheus.GaugeValue, ob.ForwardLagSeconds)
	}
	if err := c.collectConsumers(ctx, ch); err != nil {
		c.s.logger.WarnContext(ctx, "metrics scrape could not read the event consumers", "error", err)
		failed = 1
	}
	if err := c.collectBatches(ctx, ch); err != nil {
		c.s.logger.WarnContext(ctx, "metrics scrape could not read the batch tables", "error", err)
		failed = 1
	}
	ch <- prometheus.MustNewConstMetric(c.scrapeErrors, prometheus.GaugeValue, failed)
}

// metricsCounts are the values of the gauges read through capped counts
// (at most the count cap of index entries per state, per queue and state
// and per workflow status: at 10,000,000 jobs most of a scrape), shared by
// the scrapes through an agedRead.
type metricsCounts struct {
	Jobs      *queue.JobStats
	Workflows workflowCounts
}

func (s *Server) readMetricsCounts(ctx context.Context, tx pgx.Tx) (*metricsCounts, error) {
	jobs, err := s.jobStats(ctx, tx)
	if err != nil {
		return nil, err
	}
	wc, err := s.readWorkflowCounts(ctx, tx)
	if err != nil {
		return nil, err
	}
	return &metricsCounts{Jobs: jobs, Workflows: wc}, nil
}

// collectConsumers exports each event consumer's blocked lanes, read at
// scrape time, and its unfinished dispatches as last counted (see
// pendingDispatches), as the consumers page counts them.
func (c *dbCollector) collectConsumers(ctx context.Context, ch chan<- prometheus.Metric) error {
	var list []events.ConsumerInfo
	err := c.s.readTx(ctx, func(tx pgx.Tx) error {
		ok, err := c.s.tableExists(ctx, tx, laneStateIndex)
		if err != nil || !ok {
			return err
		}
		list, err = events.ListConsumersUncounted(ctx, tx, c.s.schema)
		return err
	})
	if err != nil || len(list) == 0 {
		return err
	}
	pending, takenAt, err := c.s.pending.get(ctx)
	if err != nil {
		return err
	}
	for _, ci := range list {
		ch <- prometheus.MustNewConstMetric(c.blockedLanes, prometheus.GaugeValue, float64(ci.BlockedLanes), ci.Name)
		ch <- prometheus.MustNewConstMetric(c.pendingDisp, prometheus.GaugeValue, float64(pending[ci.Name]), ci.Name)
	}
	ch <- prometheus.MustNewConstMetric(c.pendingAge, prometheus.GaugeValue, time.Since(takenAt).Seconds())
	return nil
}

func (c *dbCollector) collectBatches(ctx context.Context, ch chan<- prometheus.Metric) error {
	return c.s.readTx(ctx, func(tx pgx.Tx) error {
		ok, err := c.s.tableExists(ctx, tx, "tributary_batch_object")
		if err != nil || !ok {
			return err
		}
		streams, err := batch.ListStreams(ctx, tx, c.s.schema, "")
		if err != nil {
			return err
		}
		for _, st := range streams {
			ch <- prometheus.MustNewConstMetric(c.stagedItems, prometheus.GaugeValue, float64(st.StagedItems), st.Stream)
			ch <- prometheus.MustNewConstMetric(c.stagedBytes, prometheus.GaugeValue, float64(st.StagedBytes), st.Stream)
		}
		totals, err := batch.ListObjectTotals(ctx, tx, c.s.schema)
		if err != nil {
			return err
		}
		for _, t := range totals {
			ch <- prometheus.MustNewConstMetric(c.objects, prometheus.GaugeValue, float64(t.Objects), t.Stream)
			ch <- prometheus.MustNewConstMetric(c.objectBytes, prometheus.GaugeValue, float64(t.Bytes), t.Stream)
			ch <- prometheus.MustNewConstMetric(c.objectGzip, prometheus.GaugeValue, float64(t.CompressedBytes), t.Stream)
		}
		return nil
	})
}
