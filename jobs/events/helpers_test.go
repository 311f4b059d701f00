package events_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/jobs/events"
	"github.com/tributary-run/tributary/queue"
)

type orderPlaced struct {
	OrderID string `json:"order_id"`
	Amount  int    `json:"amount"`
}

func (o orderPlaced) Validate() error {
	if o.Amount < 0 {
		return errors.New("amount must not be negative")
	}
	return nil
}

var orderPlacedEvent = events.Define[orderPlaced]("test.order_placed", nil)

// looseOrder is the same event type as a producer without validation sees
// it, to get payloads the consumer rejects into the outbox.
type looseOrder struct {
	OrderID string `json:"order_id"`
	Amount  int    `json:"amount"`
	Extra   string `json:"extra,omitempty"`
}

var looseOrderEvent = events.Define[looseOrder]("test.order_placed", nil)

type noteV1 struct {
	Text string `json:"text"`
}

var noteEvent = events.Define[noteV1]("test.note", &events.EventOpts{EventKind: events.EventKindIntegration})

// recorder collects handler calls.
type recorder struct {
	mu    sync.Mutex
	calls []call
}

type call struct {
	consumer    string
	eventID     string
	aggregateID string
	correlation string
	attempt     int
	payload     any
}

func (r *recorder) add(c call) {
	r.mu.Lock()
	r.calls = append(r.calls, c)
	r.mu.Unlock()
}

func (r *recorder) snapshot() []call {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]call(nil), r.calls...)
}

func (r *recorder) count(pred func(call) bool) int {
	n := 0
	for _, c := range r.snapshot() {
		if pred == nil || pred(c) {
			n++
		}
	}
	return n
}

// emitLane emits one note event per text, in order, for aggregate agg, and
// returns their ids.
func emitLane(t *testing.T, db *pgtest.DB, agg string, texts ...string) []string {
	t.Helper()
	em := newEmitter(t, db)
	ids := make([]string, len(texts))
	for i, text := range texts {
		var err error
		ids[i], err = em.Emit(context.Background(), db.Pool, noteEvent, noteV1{Text: text}, events.Meta{AggregateID: agg})
		require.NoError(t, err)
	}
	return ids
}

func newEmitter(t *testing.T, db *pgtest.DB, defs ...events.Definition) *events.Emitter {
	t.Helper()
	if len(defs) == 0 {
		defs = []events.Definition{orderPlacedEvent, noteEvent}
	}
	reg, err := events.NewRegistry(defs...)
	require.NoError(t, err)
	em, err := events.NewEmitter(events.EmitterConfig{Schema: db.Schema, Registry: reg, SourceService: "test"})
	require.NoError(t, err)
	return em
}

// startEvents starts a runtime with the events machinery and the given
// consumers.
func startEvents(t *testing.T, db *pgtest.DB, fcfg events.ForwarderConfig, consumers ...*events.Consumer) (*queue.Runtime, *events.Installation) {
	t.Helper()
	var inst *events.Installation
	if fcfg.SweepInterval == 0 {
		fcfg.SweepInterval = 200 * time.Millisecond
	}
	rt := pgtest.StartRuntime(t, db, queue.RuntimeConfig{}, func(rt *queue.Runtime) {
		var err error
		inst, err = events.Install(rt, events.InstallConfig{Consumers: consumers, Forwarder: fcfg})
		require.NoError(t, err)
	})
	return rt, inst
}

func fastConsumer(t *testing.T, name string, mod func(*events.ConsumerConfig)) *events.Consumer {
	t.Helper()
	cfg := events.ConsumerConfig{Name: name, RetryDelays: []time.Duration{10 * time.Millisecond, 20 * time.Millisecond, 30 * time.Millisecond}}
	if mod != nil {
		mod(&cfg)
	}
	c, err := events.NewConsumer(cfg)
	require.NoError(t, err)
	return c
}

func outboxStatus(t *testing.T, db *pgtest.DB, id string) string {
	t.Helper()
	var s string
	err := db.Pool.QueryRow(context.Background(), db.Q(`SELECT status FROM /*schema*/tributary_outbox WHERE id = $1`), id).Scan(&s)
	if err != nil {
		return ""
	}
	return s
}

func countOutbox(t *testing.T, db *pgtest.DB) int {
	t.Helper()
	var n int
	require.NoError(t, db.Pool.QueryRow(context.Background(), db.Q(`SELECT count(*) FROM /*schema*/tributary_outbox`)).Scan(&n))
	return n
}

// planNode is a node of a plan from EXPLAIN (FORMAT JSON).
type planNode map[string]any

// num is the node's number k (0 where it has none).
func (n planNode) num(k string) float64 { v, _ := n[k].(float64); return v }

// walkPlan calls visit for every node of plan (EXPLAIN (FORMAT JSON)'s
// output), the root first, and returns the root.
func walkPlan(t *testing.T, plan []byte, visit func(n planNode)) planNode {
	t.Helper()
	var nodes []map[string]any
	require.NoError(t, json.Unmarshal(plan, &nodes))
	require.NotEmpty(t, nodes, "plan: %s", plan)
	var walk func(n planNode)
	walk = func(n planNode) {
		visit(n)
		children, _ := n["Plans"].([]any)
		for _, c := range children {
			walk(c.(map[string]any))
		}
	}
	root := planNode(nodes[0]["Plan"].(map[string]any))
	walk(root)
	return root
}
