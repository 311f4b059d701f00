package amqpbridge

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Collector exports the counters of publishers and consumers to Prometheus.
// Register it on a registry (the dashboard's Config.Collectors) and add the
// bridge's pieces as they are built.
type Collector struct {
	mu         sync.Mutex
	publishers []*Publisher
	consumers  []*Consumer
	batches    []*BatchConsumer

	published, confirmed, pubReconnects                  *prometheus.Desc
	delivered, acked, retried, failed, stale, reconnects *prometheus.Desc
	batchFlushes, batchFlushFailures, batchHandedOff     *prometheus.Desc
}

// NewCollector returns an empty collector.
func NewCollector() *Collector {
	pub := []string{"connection"}
	q := []string{"queue"}
	d := func(name, help string, labels []string) *prometheus.Desc {
		return prometheus.NewDesc("tributary_amqp_"+name, help, labels, nil)
	}
	return &Collector{
		published:          d("published_total", "Messages published (sent to the broker).", pub),
		confirmed:          d("confirmed_total", "Publishes the broker confirmed and did not return.", pub),
		pubReconnects:      d("publisher_reconnects_total", "Publisher connections replaced after a failure.", pub),
		delivered:          d("deliveries_total", "Deliveries received by consumers.", q),
		acked:              d("acked_total", "Deliveries acked (handled, retried, dead-lettered or handed off).", q),
		retried:            d("retried_total", "Deliveries republished to a retry tier.", q),
		failed:             d("dead_lettered_total", "Deliveries republished to the .failed queue.", q),
		stale:              d("stale_settlements_total", "Settlements dropped because their channel was closed or replaced.", q),
		reconnects:         d("consumer_reconnects_total", "Consumer channels reopened after a failure.", q),
		batchFlushes:       d("batch_flushes_total", "Successful batch hand-offs.", q),
		batchFlushFailures: d("batch_flush_failures_total", "Failed batch hand-offs (batch nacked).", q),
		batchHandedOff:     d("batch_messages_total", "Messages acked after a batch hand-off.", q),
	}
}

// AddPublisher exports p's counters.
func (c *Collector) AddPublisher(p *Publisher) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.publishers = append(c.publishers, p)
}

// AddConsumer exports cons's counters and those of its republishing
// publisher.
func (c *Collector) AddConsumer(cons *Consumer) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.consumers = append(c.consumers, cons)
	c.publishers = append(c.publishers, cons.pub)
}

// AddBatchConsumer exports b's counters (an Inbound bridge is one:
// AddBatchConsumer(in.BatchConsumer)).
func (c *Collector) AddBatchConsumer(b *BatchConsumer) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.batches = append(c.batches, b)
	c.publishers = append(c.publishers, b.pub)
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.published, c.confirmed, c.pubReconnects, c.delivered, c.acked, c.retried,
		c.failed, c.stale, c.reconnects, c.batchFlushes, c.batchFlushFailures, c.batchHandedOff} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	counter := func(d *prometheus.Desc, v uint64, label string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), label)
	}
	for _, p := range c.publishers {
		st := p.Stats()
		counter(c.published, st.Published, p.name)
		counter(c.confirmed, st.Confirmed, p.name)
		counter(c.pubReconnects, st.Reconnects, p.name)
	}
	consumerStats := func(q string, st ConsumerStats) {
		counter(c.delivered, st.Delivered, q)
		counter(c.acked, st.Acked, q)
		counter(c.retried, st.Retried, q)
		counter(c.failed, st.Failed, q)
		counter(c.stale, st.Stale, q)
		counter(c.reconnects, st.Reconnects, q)
	}
	for _, cons := range c.consumers {
		consumerStats(cons.topo.Main, cons.Stats())
	}
	for _, b := range c.batches {
		st := b.Stats()
		consumerStats(b.topo.Main, st.ConsumerStats)
		counter(c.batchFlushes, st.Flushes, b.topo.Main)
		counter(c.batchFlushFailures, st.FlushFailures, b.topo.Main)
		counter(c.batchHandedOff, st.HandedOff, b.topo.Main)
	}
}
