package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/cmd/tributary/internal/demoevents"
	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/jobs/events"
	"github.com/tributary-run/tributary/queue"
)

func cliStdin(t *testing.T, db *pgtest.DB, stdin []byte, args ...string) cliResult {
	t.Helper()
	return cliWithStdin(t, db, nil, stdin, args...)
}

func outboxCount(t *testing.T, db *pgtest.DB) int {
	t.Helper()
	var n int
	require.NoError(t, db.Pool.QueryRow(context.Background(), db.Q(`SELECT count(*) FROM /*schema*/tributary_outbox`)).Scan(&n))
	return n
}

func TestCLIEmitBadInput(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	cases := []struct {
		name    string
		args    []string
		stdin   []byte
		mention string
	}{
		{"NotJSON", []string{"emit", "demo.note", `{"text": `}, nil, "not valid JSON"},
		{"UnknownEventType", []string{"emit", "demo.nope", `{}`}, nil, `"demo.nope"`},
		{"UnknownField", []string{"emit", "demo.note", `{"txt":"x"}`}, nil, "txt"},
		{"WrongType", []string{"emit", "demo.order_placed", `{"order_id": 7}`}, nil, "demo.order_placed"},
		{"FailsValidation", []string{"emit", "demo.order_placed", `{"order_id":"o","amount":-1}`}, nil, "amount -1 must not be negative"},
		{"OverTheLimit", []string{"emit", "demo.note", "-"}, []byte(`{"text":"` + strings.Repeat("x", 1<<20) + `"}`), "over the limit of 1048576 bytes"},
		{"DuplicateKey", []string{"emit", "demo.note", `{"text":"a","text":"b"}`}, nil, `duplicate key "text"`},
		{"KeyByCaseOnly", []string{"emit", "demo.note", `{"TEXT":"a"}`}, nil, `key "TEXT" matches field "text" only when case is ignored`},
		{"NULInPayload", []string{"emit", "demo.note", `{"text":"\u0000"}`}, nil, `\u0000`},
		{"LoneSurrogateInPayload", []string{"emit", "demo.note", `{"text":"\ud800"}`}, nil, "surrogate"},
		{"InvalidUTF8InPayload", []string{"emit", "demo.note", "-"}, []byte("{\"text\":\"\xff\"}"), "UTF-8"},
		{"UnknownStatus", []string{"outbox", "list", "--status", "lost"}, nil, `"LOST"`},
		{"BadReplayID", []string{"outbox", "replay", "abc"}, nil, `"abc"`},
		{"ReplayNeedsIDs", []string{"outbox", "replay"}, nil, "--failed"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res := cliStdin(t, db, tc.stdin, tc.args...)
			require.Equal(t, exitUsage, res.code, "stderr: %s", res.stderr)
			oneSentence(t, res.stderr)
			require.Contains(t, res.stderr, tc.mention)
			require.Empty(t, res.stdout)
		})
	}
	require.Zero(t, outboxCount(t, db), "nothing was written")
}

func TestCLIEventsFlow(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()

	// A strict consumer of demo.order_placed runs in this process; the demo
	// consumer (demo.*) is registered too, as in the worker.
	strict, err := events.NewConsumer(events.ConsumerConfig{Name: "strict", RetryDelays: []time.Duration{10 * time.Millisecond}})
	require.NoError(t, err)
	handled := make(chan string, 10)
	events.On(strict, demoevents.OrderPlacedEvent, func(ctx context.Context, m events.Message[demoevents.OrderPlaced]) error {
		handled <- m.Payload.OrderID
		return nil
	})
	demoConsumer, err := demoevents.NewConsumer()
	require.NoError(t, err)
	pgtest.StartRuntime(t, db, queue.RuntimeConfig{}, func(rt *queue.Runtime) {
		_, err := events.Install(rt, events.InstallConfig{Consumers: []*events.Consumer{strict, demoConsumer},
			Forwarder: events.ForwarderConfig{SweepInterval: 100 * time.Millisecond}})
		require.NoError(t, err)
	})

	res := cli(t, db, nil, "emit", "demo.order_placed", `{"order_id":"o-1","amount":3}`, "--aggregate", "o-1", "--correlation", "c-1")
	require.Equal(t, 0, res.code, res.stderr)
	id := strings.TrimSpace(res.stdout)
	select {
	case got := <-handled:
		require.Equal(t, "o-1", got)
	case <-time.After(20 * time.Second):
		t.Fatal("the emitted event was not handled")
	}

	// A payload the consumer rejects (written by a producer whose type is
	// looser) is cancelled, not retried, and shows up in the CLI.
	type loose struct {
		OrderID string `json:"order_id"`
		Amount  int    `json:"amount"`
	}
	looseDef := events.Define[loose]("demo.order_placed", nil)
	reg, err := events.NewRegistry(looseDef)
	require.NoError(t, err)
	em, err := events.NewEmitter(events.EmitterConfig{Schema: db.Schema, Registry: reg})
	require.NoError(t, err)
	badID, err := em.Emit(ctx, db.Pool, looseDef, loose{OrderID: "o-2", Amount: -4}, events.Meta{AggregateID: "o-2"})
	require.NoError(t, err)

	pgtest.WaitFor(t, 20*time.Second, "the invalid dispatch to be cancelled", func() (bool, error) {
		return db.CountJobs(t, "cancelled") == 1, nil
	})
	res = cli(t, db, nil, "jobs", "list", "--state", "cancelled", "--json")
	require.Equal(t, 0, res.code, res.stderr)
	require.Contains(t, res.stdout, "amount -4 must not be negative")
	require.Contains(t, res.stdout, badID)

	res = cli(t, db, nil, "outbox", "list", "--status", "sent", "--json")
	require.Equal(t, 0, res.code, res.stderr)
	var listed struct {
		Rows []events.OutboxRow `json:"rows"`
	}
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &listed))
	require.Len(t, listed.Rows, 2)
	require.Equal(t, badID, listed.Rows[0].ID)
	require.Equal(t, id, listed.Rows[1].ID)
	require.Equal(t, "c-1", listed.Rows[1].Metadata.CorrelationID)
	require.Equal(t, "o-1", listed.Rows[1].AggregateID)

	// Replaying a SENT row delivers it again.
	res = cli(t, db, nil, "outbox", "replay", id)
	require.Equal(t, 0, res.code, res.stderr)
	require.Contains(t, res.stdout, "replayed 1")
	select {
	case got := <-handled:
		require.Equal(t, "o-1", got)
	case <-time.After(20 * time.Second):
		t.Fatal("the replayed event was not handled")
	}
}
