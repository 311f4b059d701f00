// Package amqptest holds helpers for tests that talk to a real RabbitMQ:
// reaching the broker (failing, never skipping, under CI=true), unique queue
// names with clean-up, and force-closing the connections of one test by
// their connection_name.
package amqptest

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
)

// URL returns AMQP_URL or the local default.
func URL() string {
	if u := os.Getenv("AMQP_URL"); u != "" {
		return u
	}
	return "amqp://guest:guest@127.0.0.1:5672/"
}

// Conn returns a plain connection for the test's own inspection and
// publishing. Without a broker the test fails under CI=true and is skipped
// otherwise.
func Conn(t testing.TB) *amqp.Connection {
	t.Helper()
	conn, err := amqp.Dial(URL())
	if err != nil {
		// Never a skip: a missing broker fails the test, in CI and locally.
		t.Fatalf("RabbitMQ is not reachable at %s (%v); start it with `rabbitmq-server -detached` or run `make test`", URL(), err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// Channel opens a channel on conn.
func Channel(t testing.TB, conn *amqp.Connection) *amqp.Channel {
	t.Helper()
	ch, err := conn.Channel()
	require.NoError(t, err)
	t.Cleanup(func() { _ = ch.Close() })
	return ch
}

// UniqueName returns prefix plus a random suffix.
func UniqueName(prefix string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return prefix + "-" + hex.EncodeToString(b)
}

// DeleteQueuesOnCleanup deletes the named queues when the test ends.
func DeleteQueuesOnCleanup(t testing.TB, conn *amqp.Connection, names ...string) {
	t.Helper()
	t.Cleanup(func() {
		c, err := amqp.Dial(URL())
		if err != nil {
			return
		}
		defer c.Close()
		for _, n := range names {
			ch, err := c.Channel()
			if err != nil {
				return
			}
			_, _ = ch.QueueDelete(n, false, false, false)
			_ = ch.Close()
		}
	})
}

// Get waits until a message is available in queue and returns it (acked),
// failing the test after timeout.
func Get(t testing.TB, ch *amqp.Channel, queue string, timeout time.Duration) amqp.Delivery {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		d, ok, err := ch.Get(queue, true)
		require.NoError(t, err)
		if ok {
			return d
		}
		if time.Now().After(deadline) {
			t.Fatalf("no message in %q after %s", queue, timeout)
		}
		time.Sleep(10 * time.Millisecond) // polling the broker until a deadline
	}
}

// Depth returns the number of ready messages in queue.
func Depth(t testing.TB, ch *amqp.Channel, queue string) int {
	t.Helper()
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	require.NoError(t, err)
	return q.Messages
}

// Eventually polls cond every 10ms until it holds or timeout passes.
func Eventually(t testing.TB, timeout time.Duration, msg string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met after %s: %s", timeout, msg)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// CloseConnections force-closes, through rabbitmqctl, every broker
// connection whose connection_name starts with namePrefix, and returns how
// many it closed. Other connections are never touched. One rabbitmqctl call
// finds and closes them (each call costs an Erlang VM start, about a second).
func CloseConnections(t testing.TB, namePrefix string) int {
	t.Helper()
	require.NotEmpty(t, namePrefix)
	require.NotContains(t, namePrefix, `"`)
	// Connections of other tests come and go meanwhile: one that is gone by
	// the time it is asked for its properties (noproc) is skipped, not an
	// error, and so is one still in its handshake (client_properties is the
	// atom none until the client has sent them).
	expr := fmt.Sprintf(`Prefix = <<"%s">>,
Info = fun(P) -> try rabbit_networking:connection_info(P, [client_properties]) catch _:_ -> [] end end,
L = [P || P <- rabbit_networking:connections(),
      {client_properties, Props} <- Info(P),
      is_list(Props),
      {<<"connection_name">>, longstr, N} <- Props,
      binary:longest_common_prefix([N, Prefix]) =:= byte_size(Prefix)],
[catch rabbit_networking:close_connection(P, "test fault injection") || P <- L],
length(L).`, namePrefix)
	out, err := exec.Command("rabbitmqctl", "eval", expr).CombinedOutput()
	require.NoError(t, err, "rabbitmqctl eval: %s", out)
	n, err := strconv.Atoi(strings.TrimSpace(string(out)))
	require.NoError(t, err, "rabbitmqctl eval output: %s", out)
	return n
}

// Must is a helper for the fmt-style failure of a setup step.
func Must(t testing.TB, err error, what string, args ...any) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", fmt.Sprintf(what, args...), err)
	}
}
