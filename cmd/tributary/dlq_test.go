package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/amqptest"
	"github.com/tributary-run/tributary/internal/pgtest"
)

func TestCLIDLQ(t *testing.T) {
	t.Parallel()
	conn := amqptest.Conn(t)
	ch := amqptest.Channel(t, conn)
	db := pgtest.New(t)
	suffix := make([]byte, 5)
	_, _ = rand.Read(suffix)
	name := "cli-dlq-" + hex.EncodeToString(suffix)
	main, failed := "cli/"+name, "cli/"+name+".failed"
	env := []string{"AMQP_URL=" + amqptest.URL(), "QUEUE_PREFIX=cli"}
	for _, q := range []string{main, failed} {
		_, err := ch.QueueDeclare(q, true, false, false, false, nil)
		require.NoError(t, err)
		t.Cleanup(func() {
			if c, err := conn.Channel(); err == nil {
				_, _ = c.QueueDelete(q, false, false, false)
			}
		})
	}
	for _, body := range []string{`{"a":1}`, `{"a":2}`, `{"a":3}`} {
		require.NoError(t, ch.PublishWithContext(context.Background(), "", failed, false, false, amqp.Publishing{
			Body: []byte(body), MessageId: body,
			Headers: amqp.Table{"x-retry-count": int32(5), "x-failure-reason": "retries exhausted: boom", "x-original-queue": main},
		}))
	}

	// The subtests share the queues and run in order: list, replay, error.
	t.Run("List", func(t *testing.T) {
		res := cli(t, db, env, "dlq", "list", name, "--json")
		require.Equal(t, exitOK, res.code, res.stderr)
		var doc struct {
			Depth    int `json:"depth"`
			Messages []struct {
				Body       string `json:"body"`
				Reason     string `json:"reason"`
				RetryCount int    `json:"retry_count"`
			} `json:"messages"`
		}
		require.NoError(t, json.Unmarshal([]byte(res.stdout), &doc), res.stdout)
		require.Equal(t, 3, doc.Depth)
		require.Len(t, doc.Messages, 3)
		require.Equal(t, "retries exhausted: boom", doc.Messages[0].Reason)
		require.Equal(t, 5, doc.Messages[0].RetryCount)
	})

	t.Run("ReplayWithLimit", func(t *testing.T) {
		res := cli(t, db, env, "dlq", "replay", name, "--limit", "2")
		require.Equal(t, exitOK, res.code, res.stderr)
		require.Contains(t, res.stdout, "replayed 2 messages")
		d := amqptest.Get(t, ch, main, 5*time.Second)
		require.Equal(t, int32(0), d.Headers["x-retry-count"])
		require.NotContains(t, d.Headers, "x-failure-reason")
		amqptest.Get(t, ch, main, 5*time.Second)
		q, err := ch.QueueDeclarePassive(failed, true, false, false, false, nil)
		require.NoError(t, err)
		require.Equal(t, 1, q.Messages)
	})

	t.Run("ReplayToRefusedTargets", func(t *testing.T) {
		for _, tc := range []struct {
			args    []string
			mention string
		}{
			{[]string{"dlq", "replay", name, "--to", name + ".failed"}, "failed-message queue"},
			{[]string{"dlq", "replay", name, "--to", "no-such-" + name}, `"cli/no-such-` + name + `"`},
			{[]string{"dlq", "replay", name, "--to", ""}, "--to"},
			{[]string{"dlq", "replay", ""}, "QUEUE must not be empty"},
			{[]string{"dlq", "list", ""}, "QUEUE must not be empty"},
		} {
			res := cli(t, db, env, tc.args...)
			require.Equal(t, exitUsage, res.code, res.stderr)
			oneSentence(t, res.stderr)
			require.Contains(t, res.stderr, tc.mention)
			require.Empty(t, res.stdout)
		}
		q, err := ch.QueueDeclarePassive(failed, true, false, false, false, nil)
		require.NoError(t, err)
		require.Equal(t, 1, q.Messages, "nothing was replayed")
	})

	t.Run("ReplayTo", func(t *testing.T) {
		other := "cli/" + name + "-other"
		_, err := ch.QueueDeclare(other, true, false, false, false, nil)
		require.NoError(t, err)
		t.Cleanup(func() {
			if c, err := conn.Channel(); err == nil {
				_, _ = c.QueueDelete(other, false, false, false)
			}
		})
		res := cli(t, db, env, "dlq", "replay", name, "--to", name+"-other")
		require.Equal(t, exitOK, res.code, res.stderr)
		require.Contains(t, res.stdout, "replayed 1 messages to "+name+"-other")
		d := amqptest.Get(t, ch, other, 5*time.Second)
		require.Equal(t, int32(0), d.Headers["x-retry-count"])
	})

	t.Run("UnknownQueue", func(t *testing.T) {
		res := cli(t, db, env, "dlq", "replay", "no-such-"+name)
		require.Equal(t, exitUsage, res.code, res.stderr)
		oneSentence(t, res.stderr)
		require.Contains(t, res.stderr, `"cli/no-such-`+name+`.failed"`)
		require.Empty(t, res.stdout)
	})
}
