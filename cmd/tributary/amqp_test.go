package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/amqpbridge"
	"github.com/tributary-run/tributary/internal/amqptest"
	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/jobs/batch"
)

// TestWorkerOutboundBridge runs a real worker with AMQP_URL and
// TRIBUTARY_OUTBOX_EXCHANGE: an event emitted from the CLI reaches a queue
// bound to the exchange, its outbox row becomes SENT, and the publisher's
// counters appear on /metrics.
func TestWorkerOutboundBridge(t *testing.T) {
	t.Parallel()
	conn := amqptest.Conn(t)
	ch := amqptest.Channel(t, conn)

	suffix := make([]byte, 5)
	_, _ = rand.Read(suffix)
	exchange := "tributary-test-outbox-" + hex.EncodeToString(suffix)
	queueName := exchange + "-sink"
	require.NoError(t, ch.ExchangeDeclare(exchange, "topic", true, false, false, false, nil)) // as the outbound bridge declares it
	_, err := ch.QueueDeclare(queueName, false, true, false, false, nil)
	require.NoError(t, err)
	require.NoError(t, ch.QueueBind(queueName, "demo.#", exchange, false, nil))
	t.Cleanup(func() {
		if c, err := conn.Channel(); err == nil {
			_, _ = c.QueueDelete(queueName, false, false, false)
			_ = c.ExchangeDelete(exchange, false, false)
		}
	})

	db := pgtest.New(t)
	env := []string{"AMQP_URL=" + amqptest.URL(), "TRIBUTARY_OUTBOX_EXCHANGE=" + exchange}
	worker, base := startDashboardProcess(t, db, env, "worker", "--http", "127.0.0.1:0")

	res := cli(t, db, env, "emit", "demo.note", `{"text":"over the bridge"}`, "--aggregate", "a-1")
	require.Equal(t, exitOK, res.code, res.stderr)

	var msg amqp.Delivery
	pgtest.WaitFor(t, 30*time.Second, "the event on the bound queue", func() (bool, error) {
		d, ok, err := ch.Get(queueName, true)
		if ok {
			msg = d
		}
		return ok, err
	})
	require.Equal(t, "demo.note", msg.RoutingKey)
	require.Contains(t, string(msg.Body), "over the bridge")

	pgtest.WaitFor(t, 30*time.Second, "the outbox row SENT", func() (bool, error) {
		var status string
		err := db.Pool.QueryRow(context.Background(), db.Q("SELECT status FROM /*schema*/tributary_outbox")).Scan(&status)
		return status == "SENT", err
	})

	code, body := dashboardGet(t, base+"/metrics")
	require.Equal(t, 200, code)
	var confirmed bool
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, "tributary_amqp_confirmed_total") && !strings.HasSuffix(line, " 0") {
			confirmed = true
		}
	}
	require.True(t, confirmed, "no confirmed publish on /metrics:\n%s", grepLines(body, "tributary_amqp"))
	require.Equal(t, 0, sigtermAndWait(t, worker))
}

// TestWorkerOutboundBridgeNeedsAMQP: the exchange without AMQP_URL is a
// configuration error.
func TestWorkerOutboundBridgeNeedsAMQP(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	res := cli(t, db, []string{"AMQP_URL=", "TRIBUTARY_OUTBOX_EXCHANGE=events"}, "worker")
	require.Equal(t, exitUsage, res.code, res.stderr)
	require.Contains(t, res.stderr, "TRIBUTARY_OUTBOX_EXCHANGE")
}

func grepLines(s, substr string) string {
	var out []string
	for _, line := range strings.Split(s, "\n") {
		if strings.Contains(line, substr) {
			out = append(out, line)
		}
	}
	b, _ := json.Marshal(out)
	return string(b)
}

// TestWorkerAMQPBatchQueueSIGTERM is TestBatchShutdownSIGTERM (amqpbridge)
// with the real worker: `tributary worker` with TRIBUTARY_AMQP_BATCH_QUEUE
// and batch thresholds nothing reaches holds a partial batch delivered and
// unacked; on SIGTERM it stages that batch exactly once, acks it and exits
// 0, leaving the queue empty. A restarted worker receives only what was
// published after, never the first batch again.
func TestWorkerAMQPBatchQueueSIGTERM(t *testing.T) {
	t.Parallel()
	conn := amqptest.Conn(t)
	ch := amqptest.Channel(t, conn)

	suffix := make([]byte, 5)
	_, _ = rand.Read(suffix)
	queueName := "tributary-test-batch-" + hex.EncodeToString(suffix)
	const stream = "amqp_sigterm"
	// The worker declares the queue with the default retry tiers (it runs
	// without MAX_MESSAGE_RETRIES and RETRY_*_MS).
	topo := amqpbridge.Config{}.Topology(queueName)
	t.Cleanup(func() {
		c, err := conn.Channel()
		if err != nil {
			return
		}
		for _, name := range append([]string{topo.Main, topo.Failed}, retryQueues(topo)...) {
			_, _ = c.QueueDelete(name, false, false, false)
		}
	})

	db := pgtest.New(t)
	env := []string{
		"AMQP_URL=" + amqptest.URL(),
		"QUEUE_PREFIX=",
		"TRIBUTARY_AMQP_BATCH_QUEUE=" + queueName + ":" + stream,
		// Neither the consumer nor the stream flushes by count or age
		// during the test: only the shutdown hands the batch off.
		"S3_BATCH_MAX_EVENTS=1000",
		"S3_BATCH_MAX_AGE_MS=3600000",
		"BATCH_SINK_URL=file://" + t.TempDir(),
	}
	deliveries := `tributary_amqp_deliveries_total{queue="` + topo.Main + `"}`
	acked := `tributary_amqp_acked_total{queue="` + topo.Main + `"}`

	publish := func(run string, n int) []string {
		var bodies []string
		for i := range n {
			body := fmt.Sprintf(`{"run":%q,"n":%d}`, run, i)
			require.NoError(t, ch.PublishWithContext(context.Background(), "", topo.Main, false, false,
				amqp.Publishing{ContentType: "application/json", DeliveryMode: amqp.Persistent, Body: []byte(body)}))
			bodies = append(bodies, body)
		}
		return bodies
	}
	// queueState reads the main queue's ready messages and consumers. A
	// closed connection's unacked messages become ready again, so once the
	// worker is gone, 0 ready means nothing was left unacked.
	queueState := func() (ready, consumers int) {
		c, err := conn.Channel()
		require.NoError(t, err)
		defer c.Close()
		q, err := c.QueueDeclarePassive(topo.Main, true, false, false, false, nil)
		require.NoError(t, err)
		return q.Messages, q.Consumers
	}
	// holding waits until the worker has received want messages of its
	// queue (none left ready) and returns what /metrics says.
	holding := func(base string, want int) map[string]float64 {
		var m map[string]float64
		pgtest.WaitFor(t, 15*time.Second, fmt.Sprintf("%d messages delivered to the worker", want), func() (bool, error) {
			m = scrapeMetrics(t, base)
			ready, _ := queueState()
			return m[deliveries] >= float64(want) && ready == 0, nil
		})
		return m
	}

	start := time.Now()
	worker, logs, base := startServing(t, db, env, "worker", "--http", "127.0.0.1:0")
	first := publish("first", 25)
	m := holding(base, len(first))
	require.Equal(t, float64(len(first)), m[deliveries])
	require.Zero(t, m[acked], "the partial batch was acked before the shutdown:\n%s", logs.String())
	_, consumers := queueState()
	require.Equal(t, 1, consumers)
	require.Empty(t, stagedPayloads(t, db, stream), "the partial batch was staged before the shutdown")

	require.Equal(t, 0, sigtermAndWait(t, worker), "worker logs:\n%s", logs.String())
	require.ElementsMatch(t, first, stagedPayloads(t, db, stream), "each message of the batch staged exactly once")
	ready, consumers := queueState()
	require.Zero(t, ready, "messages left in the queue after the shutdown")
	require.Zero(t, consumers)

	// Had any of the first batch been left unacked, the broker would hold it
	// ahead of the second batch: the restarted worker would receive it first
	// and its delivery count would exceed the second batch's.
	worker, logs, base = startServing(t, db, env, "worker", "--http", "127.0.0.1:0")
	second := publish("second", 3)
	m = holding(base, len(second))
	require.Equal(t, float64(len(second)), m[deliveries], "the restarted worker received messages of the first batch again:\n%s", logs.String())
	require.Equal(t, 0, sigtermAndWait(t, worker), "worker logs:\n%s", logs.String())
	require.ElementsMatch(t, append(first, second...), stagedPayloads(t, db, stream))
	ready, _ = queueState()
	require.Zero(t, ready)
	t.Logf("two worker runs took %s", time.Since(start).Round(time.Millisecond))
}

// TestWorkerAMQPBatchQueueBadValues: a bad TRIBUTARY_AMQP_BATCH_QUEUE stops
// the worker with exit 2 and one sentence naming the variable and value.
func TestWorkerAMQPBatchQueueBadValues(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	cases := []struct {
		name  string
		value string
		amqp  string
	}{
		{"EmptyQueue", ":logs", amqptest.URL()},
		{"EmptyStream", "logs:", amqptest.URL()},
		{"SpaceInQueue", "access logs", amqptest.URL()},
		{"SlashInQueue", "tenant/logs", amqptest.URL()},
		{"BadStream", "logs:a:b", amqptest.URL()},
		{"WithoutAMQPURL", "logs", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			res := cli(t, db, []string{"AMQP_URL=" + tc.amqp, "TRIBUTARY_AMQP_BATCH_QUEUE=" + tc.value}, "worker")
			require.Equal(t, exitUsage, res.code, res.stderr)
			oneSentence(t, res.stderr)
			require.Contains(t, res.stderr, "TRIBUTARY_AMQP_BATCH_QUEUE")
			require.Contains(t, res.stderr, strconv.Quote(tc.value))
		})
	}
}

func retryQueues(topo amqpbridge.Topology) []string {
	var names []string
	for _, r := range topo.Retry {
		names = append(names, r.Queue)
	}
	return names
}

// scrapeMetrics reads /metrics into sample (name with its labels) -> value.
func scrapeMetrics(t *testing.T, base string) map[string]float64 {
	t.Helper()
	code, body := dashboardGet(t, base+"/metrics")
	require.Equal(t, 200, code)
	out := map[string]float64{}
	for _, line := range strings.Split(body, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[line[:i]] = v
		}
	}
	return out
}

// stagedPayloads returns the payloads staged in stream, in order.
func stagedPayloads(t *testing.T, db *pgtest.DB, stream string) []string {
	t.Helper()
	staged, err := batch.ReadStaged(context.Background(), db.Pool, db.Schema, stream, 1<<20)
	require.NoError(t, err)
	payloads := make([]string, len(staged))
	for i, p := range staged {
		payloads[i] = string(p)
	}
	return payloads
}
