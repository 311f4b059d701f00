package batch

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

func TestCollector(t *testing.T) {
	t.Parallel()
	w := &FlushWorker{}
	w.objects.Add(2)
	w.items.Add(10)
	w.bytes.Add(300)
	w.failed.Add(1)
	s := &Stager{}
	s.staged.Add(12)
	s.bytes.Add(360)
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(NewCollector(s, w)))
	families, err := reg.Gather()
	require.NoError(t, err)
	got := map[string]float64{}
	for _, f := range families {
		got[f.GetName()] = f.GetMetric()[0].GetCounter().GetValue()
	}
	require.Equal(t, map[string]float64{
		"tributary_batch_items_staged_total":    12,
		"tributary_batch_bytes_staged_total":    360,
		"tributary_batch_objects_written_total": 2,
		"tributary_batch_items_flushed_total":   10,
		"tributary_batch_bytes_flushed_total":   300,
		"tributary_batch_flush_failures_total":  1,
	}, got)
}
