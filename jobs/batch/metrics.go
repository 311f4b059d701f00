package batch

import "github.com/prometheus/client_golang/prometheus"

// Collector exports this process's batch counters to Prometheus:
//
//	tributary_batch_items_staged_total, tributary_batch_bytes_staged_total
//	tributary_batch_objects_written_total, tributary_batch_items_flushed_total,
//	tributary_batch_bytes_flushed_total, tributary_batch_flush_failures_total
//
// Staged counts include calls whose transaction later rolled back. What is
// staged now, per stream, is in the database (ListStreams).
type Collector struct {
	stager *Stager
	worker *FlushWorker

	itemsStaged, bytesStaged                         *prometheus.Desc
	objectsWritten, itemsFlushed, bytesFlushed, fail *prometheus.Desc
}

// NewCollector returns a collector for stager and worker; either may be nil.
func NewCollector(stager *Stager, worker *FlushWorker) *Collector {
	d := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc("tributary_batch_"+name, help, nil, nil)
	}
	return &Collector{
		stager:         stager,
		worker:         worker,
		itemsStaged:    d("items_staged_total", "Items staged by this process."),
		bytesStaged:    d("bytes_staged_total", "Payload bytes staged by this process."),
		objectsWritten: d("objects_written_total", "Batch objects written by this process."),
		itemsFlushed:   d("items_flushed_total", "Items written into objects by this process."),
		bytesFlushed:   d("bytes_flushed_total", "Payload bytes written into objects by this process (before compression)."),
		fail:           d("flush_failures_total", "Flush attempts that failed (sink or database errors); they are retried."),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.itemsStaged, c.bytesStaged, c.objectsWritten, c.itemsFlushed, c.bytesFlushed, c.fail} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	counter := func(d *prometheus.Desc, v uint64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v))
	}
	if c.stager != nil {
		items, bytes := c.stager.Staged()
		counter(c.itemsStaged, items)
		counter(c.bytesStaged, bytes)
	}
	if c.worker != nil {
		objects, items, bytes, failures := c.worker.Flushed()
		counter(c.objectsWritten, objects)
		counter(c.itemsFlushed, items)
		counter(c.bytesFlushed, bytes)
		counter(c.fail, failures)
	}
}
