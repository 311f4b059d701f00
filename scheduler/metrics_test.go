package scheduler

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
)

func TestCollector(t *testing.T) {
	t.Parallel()

	db := pgtest.New(t)
	client := db.Client(t)
	clock := newFakeClock(time.Date(2030, 1, 1, 0, 0, 30, 0, time.UTC))
	s := New(client, Config{NowFunc: clock.Now, Logger: pgtest.Logger(t)})
	require.NoError(t, s.Add(Schedule{Name: "m", Spec: "* * * * *", Args: noopArgs{}, CatchUp: CatchUpEach, CatchUpMax: 2}))
	require.NoError(t, s.declare(context.Background()))
	clock.Set(time.Date(2030, 1, 1, 0, 5, 10, 0, time.UTC))
	require.NoError(t, s.fireDue(context.Background()))

	now := time.Now()
	seedOutbox(t, db, "SENT", 10, now.Add(-8*24*time.Hour))
	cleaner := newCleaner(t, client, CleanerConfig{Logger: pgtest.Logger(t)})
	_, err := cleaner.Clean(context.Background(), targetOutboxSent, 7*24*time.Hour, 0)
	require.NoError(t, err)

	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(NewCollector(s, cleaner)))
	families, err := reg.Gather()
	require.NoError(t, err)
	got := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			key := f.GetName()
			for _, l := range m.GetLabel() {
				key += "{" + l.GetName() + "=" + l.GetValue() + "}"
			}
			if m.GetCounter() != nil {
				got[key] = m.GetCounter().GetValue()
			} else {
				got[key] = m.GetGauge().GetValue()
			}
		}
	}
	require.Equal(t, 2.0, got["tributary_scheduler_fired_jobs_total"])
	require.Equal(t, 3.0, got["tributary_scheduler_skipped_fires_total{reason=catch_up}"], "00:01 to 00:03 dropped by the bound of 2")
	require.Equal(t, 0.0, got["tributary_scheduler_skipped_fires_total{reason=overlap}"])
	require.Equal(t, 10.0, got["tributary_cleanup_deleted_rows_total{target=outbox_sent}"])
	require.Equal(t, 1.0, got["tributary_cleanup_runs_total{target=outbox_sent}"])
}
