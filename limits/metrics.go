package limits

import (
	"maps"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// LimitStats is what an admitter saw of one limit at its last pass, and
// what it did since it started.
type LimitStats struct {
	// Max is the per-key cap in force (0: none); Used the jobs holding a
	// slot over all keys; Waiting the due pending jobs; Started the weight
	// of the starts within a rate limit's period; FullKeys the keys left
	// with jobs waiting after the pass (throttled).
	Max, Used, Waiting, FullKeys int
	Started                      int64
	// Admitted and Cancelled count the jobs this process's admitter made
	// available and cancelled (busy-key strategies); Passes its passes.
	Admitted, Cancelled, Passes uint64
}

// stats is an admitter's LimitStats by limit.
type stats struct {
	mu     sync.Mutex
	limits map[string]LimitStats
}

func (s *stats) update(name string, fn func(st *LimitStats)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.limits == nil {
		s.limits = map[string]LimitStats{}
	}
	st := s.limits[name]
	fn(&st)
	s.limits[name] = st
}

func (s *stats) forget(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.limits, name)
}

// Stats returns, by limit, what the admitter saw at its last pass and did
// since it started.
func (a *Admitter) Stats() map[string]LimitStats {
	a.stats.mu.Lock()
	defer a.stats.mu.Unlock()
	return maps.Clone(a.stats.limits)
}

// Collector exports an admitter's view of its limits to Prometheus, from
// memory (no query per scrape): the gauges are as of its last pass (at
// most PollInterval old). Register it on the dashboard's registry
// (dashboard.Config.Collectors; the front door does).
type Collector struct {
	admitter                          *Admitter
	max, used, waiting, full, started *prometheus.Desc
	admitted, cancelled, passes       *prometheus.Desc
}

// NewCollector returns a Collector for a.
func NewCollector(a *Admitter) *Collector {
	l := []string{"limit"}
	return &Collector{
		admitter:  a,
		max:       prometheus.NewDesc("tributary_limit_max", "Jobs a key of the limit may run at once (0: no cap).", l, nil),
		used:      prometheus.NewDesc("tributary_limit_used", "Jobs of the limit holding a slot (running, or available to run), over all keys.", l, nil),
		waiting:   prometheus.NewDesc("tributary_limit_waiting", "Due jobs of the limit waiting for a slot or for its rate.", l, nil),
		full:      prometheus.NewDesc("tributary_limit_throttled_keys", "Keys of the limit left with jobs waiting by the last pass.", l, nil),
		started:   prometheus.NewDesc("tributary_limit_rate_used", "Weight of the limit's starts within its rate period, with the admitted jobs about to start.", l, nil),
		admitted:  prometheus.NewDesc("tributary_limit_admitted_jobs_total", "Jobs this process's admitter made available.", l, nil),
		cancelled: prometheus.NewDesc("tributary_limit_cancelled_jobs_total", "Jobs this process's admitter cancelled for a busy key.", l, nil),
		passes:    prometheus.NewDesc("tributary_limit_passes_total", "Admission passes of this process over the limit.", l, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.max, c.used, c.waiting, c.full, c.started, c.admitted, c.cancelled, c.passes} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	for name, st := range c.admitter.Stats() {
		maxValue := st.Max
		if maxValue == unlimited {
			maxValue = 0
		}
		ch <- prometheus.MustNewConstMetric(c.max, prometheus.GaugeValue, float64(maxValue), name)
		ch <- prometheus.MustNewConstMetric(c.used, prometheus.GaugeValue, float64(st.Used), name)
		ch <- prometheus.MustNewConstMetric(c.waiting, prometheus.GaugeValue, float64(st.Waiting), name)
		ch <- prometheus.MustNewConstMetric(c.full, prometheus.GaugeValue, float64(st.FullKeys), name)
		ch <- prometheus.MustNewConstMetric(c.started, prometheus.GaugeValue, float64(st.Started), name)
		ch <- prometheus.MustNewConstMetric(c.admitted, prometheus.CounterValue, float64(st.Admitted), name)
		ch <- prometheus.MustNewConstMetric(c.cancelled, prometheus.CounterValue, float64(st.Cancelled), name)
		ch <- prometheus.MustNewConstMetric(c.passes, prometheus.CounterValue, float64(st.Passes), name)
	}
}
