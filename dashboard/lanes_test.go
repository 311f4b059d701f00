package dashboard

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/jobs/events"
	"github.com/tributary-run/tributary/queue"
)

type laneNote struct {
	Text string `json:"text"`
}

var laneNoteEvent = events.Define[laneNote]("test.lane_note", nil)

// laneWorld runs an ordered consumer ("audit", block policy) beside the
// dashboard; its handler fails for "fail" notes while failing is set and
// waits for gate for "gate" notes.
type laneWorld struct {
	failing atomic.Bool
	gate    chan struct{}
	em      *events.Emitter

	mu      sync.Mutex
	handled []string
}

func startLaneWorld(t *testing.T, db *pgtest.DB) *laneWorld {
	t.Helper()
	w := &laneWorld{gate: make(chan struct{})}
	w.failing.Store(true)
	c, err := events.NewConsumer(events.ConsumerConfig{Name: "audit", RetryDelays: []time.Duration{10 * time.Millisecond}})
	require.NoError(t, err)
	events.On(c, laneNoteEvent, func(ctx context.Context, m events.Message[laneNote]) error {
		switch {
		case m.Payload.Text == "fail" && w.failing.Load():
			return errors.New("ledger unavailable")
		case m.Payload.Text == "gate":
			select {
			case <-w.gate:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		w.mu.Lock()
		w.handled = append(w.handled, m.ID)
		w.mu.Unlock()
		return nil
	})
	pgtest.StartRuntime(t, db, queue.RuntimeConfig{}, func(rt *queue.Runtime) {
		_, err := events.Install(rt, events.InstallConfig{Consumers: []*events.Consumer{c},
			Forwarder: events.ForwarderConfig{SweepInterval: 100 * time.Millisecond}})
		require.NoError(t, err)
	})
	reg, err := events.NewRegistry(laneNoteEvent)
	require.NoError(t, err)
	w.em, err = events.NewEmitter(events.EmitterConfig{Schema: db.Schema, Registry: reg})
	require.NoError(t, err)
	return w
}

func (w *laneWorld) emit(t *testing.T, db *pgtest.DB, agg, text string) string {
	t.Helper()
	id, err := w.em.Emit(context.Background(), db.Pool, laneNoteEvent, laneNote{Text: text}, events.Meta{AggregateID: agg})
	require.NoError(t, err)
	return id
}

func (w *laneWorld) waitHandled(t *testing.T, id string) {
	t.Helper()
	pgtest.WaitFor(t, 20*time.Second, "event "+id+" to be handled", func() (bool, error) {
		w.mu.Lock()
		defer w.mu.Unlock()
		for _, h := range w.handled {
			if h == id {
				return true, nil
			}
		}
		return false, nil
	})
}

// asPendingJobs turns the lane events of aggregate agg (the events behind
// its lane's head) into pending dispatch jobs, as an older version wrote
// them: the jobs an operator's retry must not run out of order.
func asPendingJobs(t *testing.T, db *pgtest.DB, agg string) {
	t.Helper()
	_, err := db.Pool.Exec(context.Background(), db.Q(`WITH ev AS (
    DELETE FROM /*schema*/tributary_event_lane_event WHERE aggregate_id = $1 RETURNING queue, max_attempts, args
)
INSERT INTO /*schema*/river_job (state, attempt, max_attempts, created_at, scheduled_at, priority, args, kind, metadata, queue, tags)
SELECT 'pending', 0, max_attempts, now(), now(), 1, jsonb_set(args::jsonb, '{event}', to_jsonb((args::jsonb -> 'event')::text)),
       'tributary.event.dispatch', '{}', queue, '{}' FROM ev`), agg)
	require.NoError(t, err)
}

// waitLaneEvent waits for the event to wait as a lane event behind its
// lane's head.
func waitLaneEvent(t *testing.T, db *pgtest.DB, eventID string) {
	t.Helper()
	pgtest.WaitFor(t, 20*time.Second, "event "+eventID+" to wait as a lane event", func() (bool, error) {
		var n int
		err := db.Pool.QueryRow(context.Background(), db.Q(`SELECT count(*) FROM /*schema*/tributary_event_lane_event
            WHERE (args::jsonb->>'event')::jsonb->>'id' = $1`), eventID).Scan(&n)
		return err == nil && n == 1, nil
	})
}

// waitDispatch waits for the event's dispatch job to reach state.
func waitDispatch(t *testing.T, db *pgtest.DB, eventID, state string) int64 {
	t.Helper()
	var id int64
	pgtest.WaitFor(t, 20*time.Second, "the dispatch of "+eventID+" to be "+state, func() (bool, error) {
		var s string
		err := db.Pool.QueryRow(context.Background(), db.Q(`SELECT id, state::text FROM /*schema*/river_job
            WHERE kind = 'tributary.event.dispatch' AND (args->>'event')::jsonb->>'id' = $1`), eventID).Scan(&id, &s)
		return err == nil && s == state, nil
	})
	return id
}

func TestLanesPageAndActions(t *testing.T) {
	t.Parallel()
	_, bundle := setupServer(t, Config{Token: testToken})
	db, base := bundle.db, bundle.http.URL
	auth := []string{"Authorization", "Bearer " + testToken}
	w := startLaneWorld(t, db)

	// An aggregate id with a slash travels escaped in the action's path.
	retryHead := w.emit(t, db, "order/7", "fail")
	retryNext := w.emit(t, db, "order/7", "ok")
	skipHead := w.emit(t, db, "B", "fail")
	skipNext := w.emit(t, db, "B", "ok")
	retryJob := waitDispatch(t, db, retryHead, "discarded")
	skipJob := waitDispatch(t, db, skipHead, "discarded")

	var page LanesPage
	pgtest.WaitFor(t, 10*time.Second, "two blocked lanes", func() (bool, error) {
		res := get(t, base, "/api/lanes")
		if res.status != http.StatusOK {
			return false, fmt.Errorf("status %d: %s", res.status, res.body)
		}
		res.json(t, &page)
		return len(page.Lanes) == 2, nil
	})
	require.True(t, page.Enabled)
	for _, l := range page.Lanes {
		require.Equal(t, "audit", l.Consumer)
		require.Equal(t, "discarded", l.JobState)
		require.Contains(t, l.Reason, "ledger unavailable")
		require.Equal(t, int64(1), l.Waiting)
	}
	html := get(t, base, "/lanes")
	require.Equal(t, http.StatusOK, html.status)
	require.Contains(t, html.body, "blocked by")
	require.Contains(t, html.body, fmt.Sprintf(`<a href="/jobs/%d">job %d</a>`, retryJob, retryJob))
	require.Contains(t, html.body, "ledger unavailable")
	res := get(t, base, "/api/lanes?consumer=someone")
	require.Equal(t, http.StatusOK, res.status)
	res.json(t, &page)
	require.Empty(t, page.Lanes)
	require.Equal(t, http.StatusBadRequest, get(t, base, "/api/lanes?consumer=bad%20name").status)
	require.Equal(t, http.StatusBadRequest, get(t, base, "/api/lanes?consumer=a;b").status)

	var consumers ConsumersPage
	res = get(t, base, "/api/consumers")
	require.Equal(t, http.StatusOK, res.status, res.body)
	res.json(t, &consumers)
	require.Len(t, consumers.Consumers, 1)
	require.Equal(t, "audit", consumers.Consumers[0].Name)
	require.Equal(t, int64(2), consumers.Consumers[0].BlockedLanes)
	require.True(t, consumers.Consumers[0].Active)
	require.Contains(t, get(t, base, "/consumers").body, "test.lane_note")

	retryPath := "/api/lanes/audit/" + url.PathEscape("order/7") + "/retry"
	require.Equal(t, http.StatusUnauthorized, post(t, base, retryPath, nil).status)
	w.failing.Store(false)
	res = post(t, base, retryPath, nil, auth...)
	require.Equal(t, http.StatusOK, res.status, res.body)
	var done laneActionResult
	res.json(t, &done)
	require.Equal(t, retryJob, done.JobID)
	require.Equal(t, "order/7", done.AggregateID)
	w.waitHandled(t, retryNext)

	res = post(t, base, "/api/lanes/audit/B/skip", nil, auth...)
	require.Equal(t, http.StatusOK, res.status, res.body)
	res.json(t, &done)
	require.Equal(t, skipJob, done.JobID)
	require.Equal(t, "discarded", done.JobState)
	w.waitHandled(t, skipNext)

	res = post(t, base, "/api/lanes/audit/B/skip", nil, auth...)
	require.Equal(t, http.StatusConflict, res.status, res.body)
	require.Contains(t, res.body, "is not blocked")
	require.Equal(t, http.StatusNotFound, post(t, base, "/api/lanes/nobody/B/skip", nil, auth...).status)
	require.Equal(t, http.StatusNotFound, post(t, base, "/api/lanes/audit/B/frob", nil, auth...).status)
	require.Equal(t, http.StatusBadRequest, post(t, base, "/api/lanes/bad%20name/B/skip", nil, auth...).status)
}

func TestJobActionsKeepLanes(t *testing.T) {
	t.Parallel()
	_, bundle := setupServer(t, Config{Token: testToken})
	db, base := bundle.db, bundle.http.URL
	auth := []string{"Authorization", "Bearer " + testToken}
	w := startLaneWorld(t, db)

	head := w.emit(t, db, "A", "gate")
	next := w.emit(t, db, "A", "ok")
	headJob := waitDispatch(t, db, head, "running")
	waitLaneEvent(t, db, next)
	asPendingJobs(t, db, "A")
	nextJob := waitDispatch(t, db, next, "pending")

	res := post(t, base, fmt.Sprintf("/api/jobs/%d/retry", nextJob), nil, auth...)
	require.Equal(t, http.StatusConflict, res.status, res.body)
	require.Contains(t, res.body, fmt.Sprintf("waits behind job %d", headJob))
	require.Equal(t, "pending", jobState(t, db, nextJob))

	// Cancelling the running head gives it up: the next event runs.
	res = post(t, base, fmt.Sprintf("/api/jobs/%d/cancel", headJob), nil, auth...)
	require.Equal(t, http.StatusOK, res.status, res.body)
	w.waitHandled(t, next)
	waitDispatch(t, db, head, "cancelled")

	// Deleting a retryable head moves its lane on at once.
	w.failing.Store(true)
	failing := w.emit(t, db, "C", "fail")
	behind := w.emit(t, db, "C", "ok")
	failingJob := waitDispatch(t, db, failing, "discarded")
	res = post(t, base, fmt.Sprintf("/api/jobs/%d/delete", failingJob), nil, auth...)
	require.Equal(t, http.StatusOK, res.status, res.body)
	w.waitHandled(t, behind)
}
