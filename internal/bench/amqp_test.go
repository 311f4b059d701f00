package bench_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/amqptest"
	"github.com/tributary-run/tributary/internal/bench"
	"github.com/tributary-run/tributary/internal/pgtest"
)

// TestRunAMQP runs a small benchmark end to end: it checks that it completes and
// reports both pairs of figures, not how fast they are.
func TestRunAMQP(t *testing.T) {
	t.Parallel()
	amqptest.Conn(t) // fails under CI=true without a broker
	db := pgtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out strings.Builder
	res, err := bench.RunAMQP(ctx, bench.AMQPOptions{URL: amqptest.URL(), Messages: 1000, Rounds: 2, DB: db.Pool, Jobs: db.Client(t)}, &out)
	require.NoError(t, err, out.String())
	t.Log(out.String())
	require.Contains(t, out.String(), "publish with confirms (window 512)")
	require.Contains(t, out.String(), "consume+ack (prefetch 300, multiple ack)")
	require.Contains(t, out.String(), "River job (prefetch 1000, 4 inserters of 250)")
	require.Contains(t, out.String(), "without RabbitMQ")
	require.Positive(t, res.PublishBare)
	require.Positive(t, res.PublishBridge)
	require.Positive(t, res.InboundBare)
	require.Positive(t, res.InboundBridge)
	require.Positive(t, res.InsertOnly)
	require.Equal(t, 3000, db.CountJobs(t), "two rounds of 1,000 jobs, and 1,000 without AMQP")
}
