package dashboard

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/amqpbridge"
	"github.com/tributary-run/tributary/internal/amqptest"
	"github.com/tributary-run/tributary/internal/pgtest"
)

// amqpChannel connects to the test broker; without one the test fails.
func amqpChannel(t *testing.T) *amqp.Channel {
	t.Helper()
	return amqptest.Channel(t, amqptest.Conn(t))
}

func TestAMQPPageAndDLQReplay(t *testing.T) {
	t.Parallel()
	ch := amqpChannel(t)
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "dashboard-test-" + hex.EncodeToString(b)
	for _, q := range []string{name, name + ".failed"} {
		_, err := ch.QueueDeclare(q, true, false, false, false, nil)
		require.NoError(t, err)
		t.Cleanup(func() {
			c := amqpChannel(t)
			_, _ = c.QueueDelete(q, false, false, false)
		})
	}
	for i := range 2 {
		require.NoError(t, ch.PublishWithContext(context.Background(), "", name+".failed", false, false, amqp.Publishing{
			MessageId: "m" + string(rune('0'+i)), Body: []byte(`{"order":1}`), DeliveryMode: amqp.Persistent,
			Headers: amqp.Table{"x-retry-count": int32(5), "x-failure-reason": "handler said no"},
		}))
	}
	pgtest.WaitFor(t, 10*time.Second, "messages in the failed queue", func() (bool, error) { return amqptest.Depth(t, ch, name+".failed") == 2, nil })

	_, bundle := setupServer(t, Config{Token: testToken, AMQP: &AMQPConfig{
		Bridge: amqpbridge.Config{URL: amqptest.URL(), Logger: pgtest.Logger(t)},
		Queues: []string{name},
	}})
	res := get(t, bundle.http.URL, "/api/amqp")
	require.Equal(t, http.StatusOK, res.status, res.body)
	var page AMQPPage
	res.json(t, &page)
	require.True(t, page.Enabled)
	byRole := map[string][]amqpbridge.QueueDepth{}
	for _, q := range page.Queues {
		byRole[q.Role] = append(byRole[q.Role], q)
	}
	require.Len(t, byRole["main"], 1)
	require.Equal(t, 0, byRole["main"][0].Messages)
	require.Len(t, byRole["failed"], 1)
	require.Equal(t, 2, byRole["failed"][0].Messages)
	require.NotEmpty(t, byRole["retry"], "the retry tiers are listed (not declared here)")
	require.Contains(t, get(t, bundle.http.URL, "/amqp").body, name+".failed")

	require.Equal(t, http.StatusUnauthorized, post(t, bundle.http.URL, "/api/amqp/"+name+"/replay", nil).status)
	require.Equal(t, 2, amqptest.Depth(t, ch, name+".failed"))
	res = post(t, bundle.http.URL, "/api/amqp/not-configured/replay", nil, "Authorization", "Bearer "+testToken)
	require.Equal(t, http.StatusNotFound, res.status, res.body)

	res = post(t, bundle.http.URL, "/api/amqp/"+name+".failed/replay", nil, "Authorization", "Bearer "+testToken)
	require.Equal(t, http.StatusOK, res.status, res.body)
	var out dlqReplayResult
	res.json(t, &out)
	require.Equal(t, 2, out.Replayed)
	require.Equal(t, 0, amqptest.Depth(t, ch, name+".failed"))
	pgtest.WaitFor(t, 10*time.Second, "replayed messages in the main queue", func() (bool, error) { return amqptest.Depth(t, ch, name) == 2, nil })
}

func TestBatchesPageAndMetrics(t *testing.T) {
	t.Parallel()
	_, bundle := setupServer(t, Config{})
	insertBatchRows(t, bundle.db)

	res := get(t, bundle.http.URL, "/api/batches")
	require.Equal(t, http.StatusOK, res.status, res.body)
	var page BatchesPage
	res.json(t, &page)
	require.True(t, page.Enabled)
	require.Len(t, page.Streams, 1)
	require.Equal(t, int64(2), page.Streams[0].StagedItems)
	require.Len(t, page.Objects, 2)
	require.Contains(t, get(t, bundle.http.URL, "/batches").body, "orders/2026/obj-2.jsonl.gz")
	require.Equal(t, http.StatusBadRequest, get(t, bundle.http.URL, "/api/batches?before=x").status)

	body := get(t, bundle.http.URL, "/metrics").body
	for series, want := range map[string]float64{
		`tributary_batch_staged_items{stream="clicks"}`:            2,
		`tributary_batch_staged_bytes{stream="clicks"}`:            14,
		`tributary_batch_objects{stream="orders"}`:                 2,
		`tributary_batch_object_bytes{stream="orders"}`:            7500,
		`tributary_batch_object_compressed_bytes{stream="orders"}`: 1300,
	} {
		got, ok := metricValue(t, body, series)
		require.True(t, ok, "%s missing", series)
		require.Equal(t, want, got, series)
	}
}

// insertBatchRows stages two items of stream "clicks" and records two
// written objects of stream "orders".
func insertBatchRows(t *testing.T, db *pgtest.DB) {
	t.Helper()
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, db.Q(`INSERT INTO /*schema*/tributary_batch_chunk (stream, payload, byte_size, created_at)
		VALUES ('clicks', '{"a":1}', 7, now() - interval '1 minute'), ('clicks', '{"a":2}', 7, now())`))
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, db.Q(`INSERT INTO /*schema*/tributary_batch_object
		(batch_id, stream, key, status, first_item_id, last_item_id, item_count, bytes, compressed_bytes,
		 first_item_at, last_item_at, claimed_by_job, claimed_at, written_at)
		VALUES (gen_random_uuid(), 'orders', 'orders/2026/obj-1.jsonl.gz', 'written', 1, 100, 100, 5000, 900, now(), now(), 1, now(), now()),
		       (gen_random_uuid(), 'orders', 'orders/2026/obj-2.jsonl.gz', 'written', 101, 150, 50, 2500, 400, now(), now(), 2, now(), now())`))
	require.NoError(t, err)
}

func TestMetricsIncludeAMQPCounters(t *testing.T) {
	t.Parallel()
	ch := amqpChannel(t)
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "dashboard-metrics-" + hex.EncodeToString(b)
	_, err := ch.QueueDeclare(name, true, false, false, false, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = amqpChannel(t).QueueDelete(name, false, false, false) })

	cfg := amqpbridge.Config{URL: amqptest.URL(), ConnectionName: name, Logger: pgtest.Logger(t)}
	pub, err := amqpbridge.NewPublisher(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Stop(context.Background()) })
	col := amqpbridge.NewCollector()
	col.AddPublisher(pub)
	_, bundle := setupServer(t, Config{Collectors: []prometheus.Collector{col}})

	series := func(metric string) string {
		return metric + `{connection="` + name + `.publisher"}`
	}
	scrape := func(metric string) float64 {
		v, _ := metricValue(t, get(t, bundle.http.URL, "/metrics").body, series(metric))
		return v
	}
	require.Zero(t, scrape("tributary_amqp_published_total"))

	publish := func() {
		require.NoError(t, pub.Publish(context.Background(), "", name, amqp.Publishing{Body: []byte("x")}))
	}
	publish()
	publish()
	require.Equal(t, 2.0, scrape("tributary_amqp_published_total"))
	require.Equal(t, 2.0, scrape("tributary_amqp_confirmed_total"))
	require.Zero(t, scrape("tributary_amqp_publisher_reconnects_total"))

	// The broker drops the publisher's connection; the next publishes
	// reconnect, and the dashboard's counter shows it.
	// A broker-side fault, like a restart, for this client only.
	require.NotZero(t, amqptest.CloseConnections(t, name+".publisher"), "no connection named %s.publisher* to close", name)
	pgtest.WaitFor(t, 30*time.Second, "a publish after the connection was closed", func() (bool, error) {
		err := pub.Publish(context.Background(), "", name, amqp.Publishing{Body: []byte("y")})
		return err == nil && scrape("tributary_amqp_publisher_reconnects_total") >= 1, nil
	})
	require.GreaterOrEqual(t, scrape("tributary_amqp_confirmed_total"), 3.0)
}
