package scheduler

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Collector exports a Scheduler's and a Cleaner's counters to Prometheus.
// Either may be nil. Register it on the dashboard's registry
// (dashboard.Config.Collectors).
type Collector struct {
	scheduler *Scheduler
	cleaner   *Cleaner

	fired, skipped, duplicates, errors, orphaned *prometheus.Desc
	cleanRuns, cleanDeleted, cleanErrors         *prometheus.Desc
}

// NewCollector returns a Collector for s and c.
func NewCollector(s *Scheduler, c *Cleaner) *Collector {
	return &Collector{
		scheduler:    s,
		cleaner:      c,
		fired:        prometheus.NewDesc("tributary_scheduler_fired_jobs_total", "Jobs inserted by schedule fires.", nil, nil),
		skipped:      prometheus.NewDesc("tributary_scheduler_skipped_fires_total", "Fire times dropped, by reason (catch_up: missed while nothing ran; overlap: previous job unfinished).", []string{"reason"}, nil),
		duplicates:   prometheus.NewDesc("tributary_scheduler_duplicate_fires_total", "Fire times that already had a job and inserted none.", nil, nil),
		errors:       prometheus.NewDesc("tributary_scheduler_fire_errors_total", "Failed fire attempts (retried).", nil, nil),
		orphaned:     prometheus.NewDesc("tributary_scheduler_orphaned_schedules", "Schedules in the table not declared by this process, at its start.", nil, nil),
		cleanRuns:    prometheus.NewDesc("tributary_cleanup_runs_total", "Clean-up runs, by target.", []string{"target"}, nil),
		cleanDeleted: prometheus.NewDesc("tributary_cleanup_deleted_rows_total", "Rows deleted by clean-up, by target.", []string{"target"}, nil),
		cleanErrors:  prometheus.NewDesc("tributary_cleanup_errors_total", "Failed clean-up runs, by target.", []string{"target"}, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.fired, c.skipped, c.duplicates, c.errors, c.orphaned, c.cleanRuns, c.cleanDeleted, c.cleanErrors} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	if c.scheduler != nil {
		st := c.scheduler.Stats()
		ch <- prometheus.MustNewConstMetric(c.fired, prometheus.CounterValue, float64(st.Fired))
		ch <- prometheus.MustNewConstMetric(c.skipped, prometheus.CounterValue, float64(st.SkippedCatchUp), "catch_up")
		ch <- prometheus.MustNewConstMetric(c.skipped, prometheus.CounterValue, float64(st.SkippedOverlap), "overlap")
		ch <- prometheus.MustNewConstMetric(c.duplicates, prometheus.CounterValue, float64(st.Duplicates))
		ch <- prometheus.MustNewConstMetric(c.errors, prometheus.CounterValue, float64(st.Errors))
		ch <- prometheus.MustNewConstMetric(c.orphaned, prometheus.GaugeValue, float64(st.Orphaned))
	}
	if c.cleaner != nil {
		for target, st := range c.cleaner.Stats() {
			ch <- prometheus.MustNewConstMetric(c.cleanRuns, prometheus.CounterValue, float64(st.Runs), target)
			ch <- prometheus.MustNewConstMetric(c.cleanDeleted, prometheus.CounterValue, float64(st.Deleted), target)
			ch <- prometheus.MustNewConstMetric(c.cleanErrors, prometheus.CounterValue, float64(st.Errors), target)
		}
	}
}
