package amqpbridge

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/amqptest"
)

// logBuffer is a concurrency-safe log sink for asserting on warnings.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// containsEventually polls the log for s for up to 5 seconds.
func (l *logBuffer) containsEventually(t *testing.T, s string) bool {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(l.String(), s) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond) // polling the log until a deadline
	}
	return true
}

type testBundle struct {
	cfg   Config
	conn  *amqp.Connection
	ch    *amqp.Channel
	logs  *logBuffer
	queue string
}

// testConfig returns a config with small delays, a unique connection name
// and a captured logger, and registers clean-up of the queue's topology.
func testConfig(t *testing.T, queue string) (Config, *testBundle) {
	t.Helper()
	conn := amqptest.Conn(t)
	logs := &logBuffer{}
	cfg := Config{
		URL:            amqptest.URL(),
		RetryBase:      50 * time.Millisecond,
		RetryMax:       400 * time.Millisecond,
		ConnectionName: amqptest.UniqueName("tributary-test"),
		ReconnectMin:   20 * time.Millisecond,
		ReconnectMax:   500 * time.Millisecond,
		Logger:         slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	b := &testBundle{cfg: cfg, conn: conn, ch: amqptest.Channel(t, conn), logs: logs, queue: queue}
	return cfg, b
}

// cleanupTopology deletes every queue of topo when the test ends.
func cleanupTopology(t *testing.T, conn *amqp.Connection, topo Topology) {
	names := []string{topo.Main, topo.Failed}
	for _, r := range topo.Retry {
		names = append(names, r.Queue)
	}
	amqptest.DeleteQueuesOnCleanup(t, conn, names...)
}

// startInbound builds and starts an inbound bridge, stopping it when the
// test ends.
func startInbound(t *testing.T, cfg Config, b *testBundle, ic InboundConfig) *Inbound {
	t.Helper()
	in, err := NewInbound(cfg, ic)
	require.NoError(t, err)
	cleanupTopology(t, b.conn, in.Topology())
	require.NoError(t, in.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = in.Stop(ctx)
	})
	return in
}

// startConsumer builds and starts a consumer, stopping it when the test ends.
func startConsumer(t *testing.T, cfg Config, cc ConsumerConfig) *Consumer {
	t.Helper()
	c, err := NewConsumer(cfg, cc)
	require.NoError(t, err)
	cleanupTopology(t, amqptest.Conn(t), c.Topology())
	require.NoError(t, c.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Stop(ctx)
	})
	return c
}

func publishRaw(t *testing.T, ch *amqp.Channel, queue string, body []byte, headers amqp.Table) {
	t.Helper()
	require.NoError(t, ch.PublishWithContext(context.Background(), "", queue, false, false, amqp.Publishing{
		Body: body, Headers: headers, DeliveryMode: amqp.Persistent, ContentType: "application/json",
	}))
}

func headerString(h amqp.Table, key string) string {
	s, _ := h[key].(string)
	return s
}

func containsAll(s string, parts ...string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

func amqpPublishing(body string) amqp.Publishing {
	return amqp.Publishing{Body: []byte(body)}
}
