package dashboard

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"

	"github.com/tributary-run/tributary/queue"
)

// JobMetrics counts the jobs a worker process works, from River's event
// stream: runs and failures by kind and queue and a run-time histogram. It
// is a queue.Service (it subscribes on Start) and a prometheus.Collector.
//
// River drops events when a subscriber falls more than 1000 behind; this
// subscriber only bumps counters, so it keeps up with any job rate River
// reaches.
type JobMetrics struct {
	rt *queue.Runtime

	worked   *prometheus.CounterVec
	failed   *prometheus.CounterVec
	duration *prometheus.HistogramVec
	wait     *prometheus.HistogramVec

	life queue.Lifecycle
}

// NewJobMetrics returns job metrics for rt's River client. Add it to rt
// with AddService and register it on a registry.
func NewJobMetrics(rt *queue.Runtime) *JobMetrics {
	labels := []string{"kind", "queue"}
	return &JobMetrics{
		rt: rt,
		worked: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tributary_jobs_worked_total",
			Help: "Job runs this process finished, by outcome: completed, failed (the run returned an error or panicked, whether or not it will be retried), cancelled, snoozed.",
		}, []string{"kind", "queue", "outcome"}),
		failed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tributary_jobs_failed_total",
			Help: "Job runs this process finished with an error or a panic (retried or discarded).",
		}, labels),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "tributary_job_duration_seconds",
			Help:    "How long job runs took in the worker, by kind and queue.",
			Buckets: []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300},
		}, labels),
		wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "tributary_job_queue_wait_seconds",
			Help:    "How long jobs waited between becoming available and starting, by queue.",
			Buckets: []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 1800},
		}, []string{"queue"}),
	}
}

// Describe implements prometheus.Collector.
func (m *JobMetrics) Describe(ch chan<- *prometheus.Desc) {
	m.worked.Describe(ch)
	m.failed.Describe(ch)
	m.duration.Describe(ch)
	m.wait.Describe(ch)
}

// Collect implements prometheus.Collector.
func (m *JobMetrics) Collect(ch chan<- prometheus.Metric) {
	m.worked.Collect(ch)
	m.failed.Collect(ch)
	m.duration.Collect(ch)
	m.wait.Collect(ch)
}

// Name implements queue.Service.
func (m *JobMetrics) Name() string { return "job metrics" }

// Start subscribes to River's job events.
func (m *JobMetrics) Start(ctx context.Context) error {
	return m.life.Start(ctx, m.Name(), func(run *queue.Run) error {
		events, unsubscribe := m.rt.River().SubscribeConfig(&river.SubscribeConfig{
			ChanSize: 10000,
			Kinds: []river.EventKind{
				river.EventKindJobCompleted, river.EventKindJobFailed,
				river.EventKindJobCancelled, river.EventKindJobSnoozed,
			},
		})
		// Unsubscribing closes the channel, which ends the loop.
		context.AfterFunc(run.Stopping(), unsubscribe)
		run.Go(func() { m.loop(events) })
		return nil
	})
}

func (m *JobMetrics) loop(events <-chan *river.Event) {
	for ev := range events {
		m.observe(ev)
	}
}

func (m *JobMetrics) observe(ev *river.Event) {
	if ev == nil || ev.Job == nil {
		return
	}
	kind, q := ev.Job.Kind, ev.Job.Queue
	var outcome string
	switch ev.Kind {
	case river.EventKindJobCompleted:
		outcome = "completed"
	case river.EventKindJobFailed:
		outcome = "failed"
		m.failed.WithLabelValues(kind, q).Inc()
	case river.EventKindJobCancelled:
		outcome = "cancelled"
	case river.EventKindJobSnoozed:
		outcome = "snoozed"
	default:
		return
	}
	m.worked.WithLabelValues(kind, q, outcome).Inc()
	if ev.JobStats != nil {
		m.duration.WithLabelValues(kind, q).Observe(ev.JobStats.RunDuration.Seconds())
		m.wait.WithLabelValues(q).Observe(ev.JobStats.QueueWaitDuration.Seconds())
	}
}

// Stop ends the subscription and waits for the counting loop.
func (m *JobMetrics) Stop(ctx context.Context) error {
	_, err := m.life.Stop(ctx)
	return err
}
