package amqpbatch

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/amqpbridge"
	"github.com/tributary-run/tributary/internal/amqptest"
	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/jobs/batch"
)

type testBundle struct {
	db       *pgtest.DB
	ch       *amqp.Channel
	consumer *amqpbridge.BatchConsumer
}

func setup(t *testing.T, handOff func(stager *batch.Stager) amqpbridge.HandOffFunc) *testBundle {
	t.Helper()
	db := pgtest.New(t)
	stager, err := batch.NewStager(db.Client(t), batch.Config{Defaults: batch.StreamConfig{MaxEvents: 1000}})
	require.NoError(t, err)

	ch := amqptest.Channel(t, amqptest.Conn(t))

	cfg := amqpbridge.Config{URL: amqptest.URL(), ConnectionName: amqptest.UniqueName("amqpbatch"), Logger: pgtest.Logger(t)}
	c, err := amqpbridge.NewBatchConsumer(cfg, amqpbridge.BatchConsumerConfig{
		Queue:         amqptest.UniqueName("batch-stage"),
		MaxEvents:     5,
		MaxAge:        200 * time.Millisecond,
		TimerInterval: 50 * time.Millisecond,
		HandOff:       handOff(stager),
	})
	require.NoError(t, err)
	topo := c.Topology()
	t.Cleanup(func() {
		names := []string{topo.Main, topo.Failed}
		for _, r := range topo.Retry {
			names = append(names, r.Queue)
		}
		for _, n := range names {
			_, _ = ch.QueueDelete(n, false, false, false)
		}
	})
	require.NoError(t, c.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Stop(ctx)
	})
	return &testBundle{db: db, ch: ch, consumer: c}
}

func (b *testBundle) publish(t *testing.T, body string) {
	t.Helper()
	require.NoError(t, b.ch.PublishWithContext(context.Background(), "", b.consumer.Topology().Main, false, false,
		amqp.Publishing{ContentType: "application/json", Body: []byte(body)}))
}

// TestStageHandOff: messages of the batch-ACK consumer are staged in
// Postgres and acked after the commit; a body that is not JSON goes to the
// .failed queue without failing its batch.
func TestStageHandOff(t *testing.T) {
	t.Parallel()
	b := setup(t, func(s *batch.Stager) amqpbridge.HandOffFunc { return StageHandOff(s, "amqp_logs") })
	for i := range 12 {
		b.publish(t, fmt.Sprintf(`{"n":%d}`, i))
		if i == 6 {
			b.publish(t, "not json")
		}
	}
	ctx := context.Background()
	pgtest.WaitFor(t, 20*time.Second, "12 items staged and acked", func() (bool, error) {
		staged, err := batch.ReadStaged(ctx, b.db.Pool, b.db.Schema, "amqp_logs", 100)
		return len(staged) == 12 && amqptest.Depth(t, b.ch, b.consumer.Topology().Main) == 0 && b.consumer.Stats().HandedOff >= 12, err
	})
	pgtest.WaitFor(t, 10*time.Second, "the poison message in .failed", func() (bool, error) {
		return amqptest.Depth(t, b.ch, b.consumer.Topology().Failed) == 1, nil
	})
	staged, err := batch.ReadStaged(ctx, b.db.Pool, b.db.Schema, "amqp_logs", 100)
	require.NoError(t, err)
	var got []string
	for _, p := range staged {
		got = append(got, string(p))
	}
	for i := range 12 {
		require.Equal(t, fmt.Sprintf(`{"n":%d}`, i), got[i])
	}
}

// TestSinkHandOff: the seed's direct-to-sink hand-off writes each batch as
// one object.
func TestSinkHandOff(t *testing.T) {
	t.Parallel()
	sink, err := batch.OpenSink(context.Background(), "file://"+filepath.Join(t.TempDir(), "direct"))
	require.NoError(t, err)
	b := setup(t, func(*batch.Stager) amqpbridge.HandOffFunc {
		h, err := SinkHandOff(sink, "", "direct")
		require.NoError(t, err)
		return h
	})
	for i := range 10 {
		b.publish(t, fmt.Sprintf(`{"n":%d}`, i))
	}
	pgtest.WaitFor(t, 20*time.Second, "two objects of 5", func() (bool, error) {
		return b.consumer.Stats().HandedOff >= 10 && amqptest.Depth(t, b.ch, b.consumer.Topology().Main) == 0, nil
	})
	it := sink.Bucket().List(nil)
	objects := 0
	for {
		obj, err := it.Next(context.Background())
		if err != nil {
			break
		}
		require.Regexp(t, `^direct/dt=\d{4}-\d{2}-\d{2}/hour=\d{2}/[0-9a-f]{32}\.jsonl\.gz$`, obj.Key)
		objects++
	}
	require.Equal(t, 2, objects)
}
