package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
)

// TestWorkerOutboundBridge runs a real worker with AMQP_URL and
// TRIBUTARY_OUTBOX_EXCHANGE: an event emitted from the CLI reaches a queue
// bound to the exchange, its outbox row becomes SENT, and the publisher's
// counters appear on /metrics.
func TestWorkerOutboundBridge(t *testing.T) {
	t.Parallel()
	conn, err := amqp.Dial(amqpTestURL())
	require.NoError(t, err, "the test needs RabbitMQ at %s", amqpTestURL())
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	require.NoError(t, err)

	suffix := make([]byte, 5)
	_, _ = rand.Read(suffix)
	exchange := "tributary-test-outbox-" + hex.EncodeToString(suffix)
	queueName := exchange + "-sink"
	require.NoError(t, ch.ExchangeDeclare(exchange, "topic", true, false, false, false, nil)) // as the outbound bridge declares it
	_, err = ch.QueueDeclare(queueName, false, true, false, false, nil)
	require.NoError(t, err)
	require.NoError(t, ch.QueueBind(queueName, "demo.#", exchange, false, nil))
	t.Cleanup(func() {
		if c, err := conn.Channel(); err == nil {
			_, _ = c.QueueDelete(queueName, false, false, false)
			_ = c.ExchangeDelete(exchange, false, false)
		}
	})

	db := pgtest.New(t)
	env := []string{"AMQP_URL=" + amqpTestURL(), "TRIBUTARY_OUTBOX_EXCHANGE=" + exchange}
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
