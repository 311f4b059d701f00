package bench_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/cmd/tributary/internal/bench"
	"github.com/tributary-run/tributary/internal/amqptest"
	"github.com/tributary-run/tributary/internal/pgtest"
)

// TestRunAMQP runs a small benchmark end to end: it checks that it completes and
// reports every side's figures, not how fast they are.
func TestRunAMQP(t *testing.T) {
	t.Parallel()
	amqptest.Conn(t) // fails under CI=true without a broker
	db := pgtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out strings.Builder
	res, err := bench.RunAMQP(ctx, bench.AMQPOptions{URL: amqptest.URL(), Messages: 1000, Rounds: 2, DB: db.Pool, Jobs: db.Client(t),
		InboxSchema: db.Schema}, &out)
	require.NoError(t, err, out.String())
	t.Log(out.String())
	require.Contains(t, out.String(), "publish with confirms (window 512)")
	require.Contains(t, out.String(), "consume+ack (prefetch 300, multiple ack)")
	require.Contains(t, out.String(), "AMQP -> inbox (amqpinbox.Statements: one batch row and job per transaction, one round trip; prefetch 1000, 2 inserters of 500)")
	require.Contains(t, out.String(), "inbound, one River job per message (JobInserter, beside the goal's side): tributary AMQP -> River job (prefetch 1000, 4 inserters of 250)")
	require.Contains(t, out.String(), "without RabbitMQ")
	// The goal's pair (bare loop, inbox) next to each other, the order
	// reversed in round 2, each consume after a checkpoint.
	require.Regexp(t, `round 1: (?s:.*)\n  order bare, inbox, River jobs; CHECKPOINT before each consume took [\d.]+ms, [\d.]+ms, [\d.]+ms\n`, out.String())
	require.Regexp(t, `round 2: (?s:.*)\n  order River jobs, inbox, bare; CHECKPOINT before each consume took [\d.]+ms, [\d.]+ms, [\d.]+ms\n`, out.String())
	require.Regexp(t, `inbox handled: .* round 2's backlog of 1000 messages at \d+ msg/s`, out.String())
	require.Positive(t, res.PublishBare)
	require.Positive(t, res.PublishBridge)
	require.Positive(t, res.InboundBare)
	require.Positive(t, res.InboundBridge)
	require.Positive(t, res.InboundInbox)
	require.Len(t, res.InboundInboxRatios, 2)
	require.Positive(t, res.InboxHandled)
	require.Positive(t, res.InsertOnly)
	count := func(sql string) int {
		var n int
		require.NoError(t, db.Pool.QueryRow(ctx, db.Q(sql)).Scan(&n))
		return n
	}
	require.Equal(t, 3000, count(`SELECT count(*) FROM /*schema*/river_job WHERE kind = 'bench.amqp'`), "two rounds of 1,000 jobs, and 1,000 without AMQP")
	require.Equal(t, 1000, count(`SELECT coalesce(sum(count), 0) FROM /*schema*/tributary_inbox_batch`),
		"round 1's inbox backlog is left; round 2's was handled")
}
