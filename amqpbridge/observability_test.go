package amqpbridge

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/amqptest"
)

func TestCollectorAndQueueDepths(t *testing.T) {
	t.Parallel()
	cfg, b := testConfig(t, amqptest.UniqueName("observe"))
	c := startConsumer(t, cfg, ConsumerConfig{Queue: b.queue, Handler: func(ctx context.Context, d *Delivery) error {
		if string(d.Body) == "bad" {
			return Permanent(errors.New("bad body"))
		}
		return nil
	}})
	pub, err := NewPublisher(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Stop(context.Background()) })

	reg := prometheus.NewRegistry()
	col := NewCollector()
	col.AddPublisher(pub)
	col.AddConsumer(c)
	require.NoError(t, reg.Register(col))

	for _, body := range []string{"good", "bad"} {
		require.NoError(t, pub.Publish(context.Background(), "", c.Topology().Main, amqpPublishing(body)))
	}
	amqptest.Eventually(t, 5*time.Second, "both settled", func() bool { return c.Stats().Acked == 2 })

	values := map[string]float64{}
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetValue() == c.Topology().Main || l.GetValue() == cfg.ConnectionName+".publisher" {
					values[f.GetName()] = m.GetCounter().GetValue()
				}
			}
		}
	}
	require.Equal(t, 2.0, values["tributary_amqp_published_total"])
	require.Equal(t, 2.0, values["tributary_amqp_confirmed_total"])
	require.Equal(t, 2.0, values["tributary_amqp_deliveries_total"])
	require.Equal(t, 1.0, values["tributary_amqp_dead_lettered_total"])

	depths, err := QueueDepths(context.Background(), cfg, b.queue, "never-declared-"+b.queue)
	require.NoError(t, err)
	byName := map[string]QueueDepth{}
	for _, d := range depths {
		byName[d.Name] = d
	}
	topo := c.Topology()
	require.Equal(t, QueueDepth{Name: topo.Main, Role: "main", Messages: 0, Consumers: 1}, byName[topo.Main])
	require.Equal(t, 1, byName[topo.Failed].Messages)
	require.Equal(t, "retry", byName[topo.Retry[0].Queue].Role)
	require.True(t, byName["never-declared-"+b.queue].Missing)
}
