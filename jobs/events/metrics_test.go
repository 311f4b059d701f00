package events_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/jobs/events"
	"github.com/tributary-run/tributary/outbox"
)

func TestCollector(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	f, err := events.NewForwarder(db.Pool, events.ForwarderConfig{Schema: db.Schema, Publishers: []outbox.Publisher{newWatchPublisher()}})
	require.NoError(t, err)
	d, err := events.NewDispatcher(db.Pool, events.DispatcherConfig{Schema: db.Schema})
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(events.NewCollector(f, d)))
	families, err := reg.Gather()
	require.NoError(t, err)
	names := map[string]float64{}
	for _, mf := range families {
		names[mf.GetName()] = mf.GetMetric()[0].GetCounter().GetValue()
	}
	require.Len(t, names, 10)
	require.Contains(t, names, "tributary_events_dispatches_chained_total")
	require.Contains(t, names, "tributary_events_forwarded_total")
	require.Contains(t, names, "tributary_events_handler_panics_total")
}
