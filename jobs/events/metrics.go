package events

import "github.com/prometheus/client_golang/prometheus"

// Collector exports a forwarder's and a dispatcher's counters to
// Prometheus. Either may be nil.
type Collector struct {
	forwarder  *Forwarder
	dispatcher *Dispatcher

	forwarded, batches, forwardFailures, staleResets *prometheus.Desc
	handled, failed, panics, validation, givenUp     *prometheus.Desc
	chained                                          *prometheus.Desc
}

// NewCollector returns a collector for f and d (as Install returns them).
func NewCollector(f *Forwarder, d *Dispatcher) *Collector {
	desc := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc("tributary_events_"+name, help, nil, nil)
	}
	return &Collector{
		forwarder:       f,
		dispatcher:      d,
		forwarded:       desc("forwarded_total", "Outbox rows this process marked SENT."),
		batches:         desc("forward_batches_total", "Forwarding batches this process sent."),
		forwardFailures: desc("forward_failures_total", "Outbox rows whose forwarding attempt failed in this process."),
		staleResets:     desc("stale_claims_reset_total", "CLAIMED outbox rows this process returned to PENDING after the cut-off."),
		handled:         desc("dispatches_handled_total", "Dispatches whose handlers all succeeded."),
		failed:          desc("dispatch_failures_total", "Dispatch attempts that failed (errors and panics)."),
		panics:          desc("handler_panics_total", "Handler panics recovered."),
		validation:      desc("validation_failures_total", "Dispatches cancelled because the payload failed decoding or validation."),
		givenUp:         desc("dispatches_given_up_total", "Dispatches that will not be retried (validation failure or attempts used up)."),
		chained:         desc("dispatches_chained_total", "Dispatches handled in place by a lane chain (also counted as handled)."),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.forwarded, c.batches, c.forwardFailures, c.staleResets,
		c.handled, c.failed, c.panics, c.validation, c.givenUp, c.chained} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	type counter struct {
		desc  *prometheus.Desc
		value int64
	}
	var counters []counter
	if c.forwarder != nil {
		s := c.forwarder.Stats()
		counters = append(counters, counter{c.forwarded, s.Forwarded}, counter{c.batches, s.Batches},
			counter{c.forwardFailures, s.Failures}, counter{c.staleResets, s.StaleResets})
	}
	if c.dispatcher != nil {
		s := c.dispatcher.Stats()
		counters = append(counters, counter{c.handled, s.Handled}, counter{c.failed, s.Failed}, counter{c.panics, s.Panics},
			counter{c.validation, s.ValidationFailures}, counter{c.givenUp, s.GivenUp}, counter{c.chained, s.Chained})
	}
	for _, m := range counters {
		ch <- prometheus.MustNewConstMetric(m.desc, prometheus.CounterValue, float64(m.value))
	}
}
