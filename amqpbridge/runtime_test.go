package amqpbridge

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/amqptest"
	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/queue"
)

type echoArgs struct {
	N int `json:"n"`
}

func (echoArgs) Kind() string { return "amqp.echo" }

// TestRuntimeOrderedLifecycle runs the bridge inside tributary's runtime: a
// publisher added first, an inbound bridge after it. Messages published
// through the publisher become River jobs that the runtime's workers run. On
// Stop the runtime stops the inbound bridge (consuming, hand-off, acks,
// channel, connection) before it closes the publisher.
func TestRuntimeOrderedLifecycle(t *testing.T) {
	t.Parallel()
	cfg, b := testConfig(t, amqptest.UniqueName("runtime"))
	db := pgtest.New(t)
	client := db.Client(t)
	pub, err := NewPublisher(cfg)
	require.NoError(t, err)
	in, err := NewInbound(cfg, InboundConfig{Queue: b.queue, DB: db.Pool, Insert: JobInserter(client, "amqp.echo", nil)})
	require.NoError(t, err)
	cleanupTopology(t, b.conn, in.Topology())

	worked := make(chan int, 10)
	rt := pgtest.StartRuntime(t, db, queue.RuntimeConfig{Logger: cfg.Logger}, func(rt *queue.Runtime) {
		queue.AddWorker(rt, river.WorkFunc(func(ctx context.Context, job *river.Job[echoArgs]) error {
			worked <- job.Args.N
			return nil
		}))
		require.NoError(t, rt.AddService(pub))
		require.NoError(t, rt.AddService(in))
	})

	for n := 1; n <= 3; n++ {
		require.NoError(t, pub.Publish(context.Background(), "", in.Topology().Main, amqp.Publishing{Body: fmt.Appendf(nil, `{"n":%d}`, n)}))
	}
	got := map[int]bool{}
	for range 3 {
		select {
		case n := <-worked:
			got[n] = true
		case <-time.After(20 * time.Second):
			t.Fatal("jobs from AMQP messages did not run")
		}
	}
	require.Equal(t, map[int]bool{1: true, 2: true, 3: true}, got)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, rt.Stop(ctx))
	logs := b.logs.String()
	consumerStopped := strings.Index(logs, "amqp batch consumer stopped")
	publisherClosed := strings.Index(logs, `msg="amqp publisher closed" connection=`+cfg.ConnectionName+".publisher")
	require.Positive(t, consumerStopped, logs)
	require.Positive(t, publisherClosed, logs)
	require.Less(t, consumerStopped, publisherClosed, "the consumer stops before the publisher closes")
}
