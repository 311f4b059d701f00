package inbox

import "github.com/prometheus/client_golang/prometheus"

// Collector exports inboxes' counters (Stats) to Prometheus, one series per
// inbox (label inbox).
type Collector struct {
	inboxes []*Inbox

	handled, failed, panics, givenUp, split, batches *prometheus.Desc
}

// NewCollector returns a collector for the inboxes.
func NewCollector(inboxes ...*Inbox) *Collector {
	desc := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc("tributary_inbox_"+name, help, []string{"inbox"}, nil)
	}
	return &Collector{
		inboxes: inboxes,
		handled: desc("messages_handled_total", "Inbox messages whose handler succeeded in this process."),
		failed:  desc("message_failures_total", "Failed handler attempts (errors and panics) in this process."),
		panics:  desc("handler_panics_total", "Handler panics recovered in this process."),
		givenUp: desc("messages_given_up_total", "Inbox messages discarded or cancelled (attempts used up, Permanent, JobCancel)."),
		split:   desc("messages_split_total", "Inbox messages a slow batch handed to jobs of their own."),
		batches: desc("batches_total", "Inbox batch jobs this process finished."),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.handled, c.failed, c.panics, c.givenUp, c.split, c.batches} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	for _, ib := range c.inboxes {
		s := ib.Stats()
		for _, m := range []struct {
			desc  *prometheus.Desc
			value int64
		}{{c.handled, s.Handled}, {c.failed, s.Failed}, {c.panics, s.Panics}, {c.givenUp, s.GivenUp}, {c.split, s.Split}, {c.batches, s.Batches}} {
			ch <- prometheus.MustNewConstMetric(m.desc, prometheus.CounterValue, float64(m.value), ib.Name())
		}
	}
}
