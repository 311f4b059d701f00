package dashboard

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/jobs/batch"
	"github.com/tributary-run/tributary/queue"
)

// TestMetricsChangeWhenBatchesFlush stages items with the batch engine and
// lets its flush job write an object: the dashboard's database gauges and
// the engine's own counters (registered through Config.Collectors) move.
func TestMetricsChangeWhenBatchesFlush(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	sink, err := batch.OpenSink(ctx, "mem://")
	require.NoError(t, err)
	t.Cleanup(func() { _ = sink.Close() })
	streams := batch.Config{Defaults: batch.StreamConfig{MaxEvents: 3}}

	var stager *batch.Stager
	var svc *Service
	pgtest.StartRuntime(t, db, queue.RuntimeConfig{}, func(rt *queue.Runtime) {
		fw, err := batch.Register(rt, batch.FlusherConfig{Streams: streams, Sink: sink, Logger: pgtest.Logger(t)}, batch.AgeTimerConfig{})
		require.NoError(t, err)
		stager, err = batch.NewStager(rt.Client, streams)
		require.NoError(t, err)
		_, svc, err = InstallWorker(rt, Config{
			Addr: "127.0.0.1:0", Logger: pgtest.Logger(t),
			Collectors: []prometheus.Collector{batch.NewCollector(stager, fw)},
		})
		require.NoError(t, err)
	})
	base := "http://" + svc.Addr()
	scrape := func(series string) float64 {
		v, _ := metricValue(t, get(t, base, "/metrics").body, series)
		return v
	}
	require.Zero(t, scrape(`tributary_batch_objects{stream="clicks"}`))
	require.Zero(t, scrape(`tributary_batch_objects_written_total`))

	// Three items reach MaxEvents: the stager enqueues a flush, which writes
	// one object.
	require.NoError(t, stager.Stage(ctx, "clicks", []byte(`{"n":1}`), []byte(`{"n":2}`), []byte(`{"n":3}`)))
	pgtest.WaitFor(t, 30*time.Second, "the flush to be counted", func() (bool, error) {
		return scrape(`tributary_batch_objects{stream="clicks"}`) == 1 && scrape(`tributary_batch_objects_written_total`) == 1, nil
	})
	require.Equal(t, 21.0, scrape(`tributary_batch_object_bytes{stream="clicks"}`), "three 7-byte items")
	require.Greater(t, scrape(`tributary_batch_object_compressed_bytes{stream="clicks"}`), 0.0)
	require.Equal(t, 3.0, scrape(`tributary_batch_items_flushed_total`))
	require.Equal(t, 3.0, scrape(`tributary_batch_items_staged_total`))
	require.Zero(t, scrape(`tributary_batch_staged_items{stream="clicks"}`), "nothing left staged")

	res := get(t, base, "/api/batches?stream=clicks")
	require.Equal(t, 200, res.status, res.body)
	var page BatchesPage
	res.json(t, &page)
	require.Len(t, page.Objects, 1)
	require.Equal(t, 3, page.Objects[0].Items)
}
