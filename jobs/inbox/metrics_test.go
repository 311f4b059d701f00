package inbox_test

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/jobs/inbox"
)

func TestCollector(t *testing.T) {
	t.Parallel()
	handle := func(context.Context, *inbox.Message) error { return nil }
	a, err := inbox.New(inbox.Config{Name: "a", HandleFunc: handle})
	require.NoError(t, err)
	b, err := inbox.New(inbox.Config{Name: "b", HandleFunc: handle})
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(inbox.NewCollector(a, b)))
	families, err := reg.Gather()
	require.NoError(t, err)
	series := map[string][]string{}
	for _, mf := range families {
		for _, m := range mf.GetMetric() {
			series[mf.GetName()] = append(series[mf.GetName()], m.GetLabel()[0].GetValue())
		}
	}
	require.Len(t, series, 6)
	require.Equal(t, []string{"a", "b"}, series["tributary_inbox_messages_handled_total"])
	require.Contains(t, series, "tributary_inbox_handler_panics_total")
	require.Contains(t, series, "tributary_inbox_messages_split_total")
}
