package dashboard

import (
	"context"
	"fmt"
	"net/http"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/queue"
)

func insertOutboxRow(t *testing.T, db *pgtest.DB, status string) string {
	t.Helper()
	id := uuid.NewString()
	_, err := db.Pool.Exec(context.Background(), db.Q(`INSERT INTO /*schema*/tributary_outbox
		(id, event_type, event_version, event_kind, payload, metadata, source_service, status, retry_count, last_error, created_at, failed_at)
		VALUES ($1, 'order.placed', 1, 'domain', '{}', '{}', 'test', $2, 3, 'broker said no', now(), CASE WHEN $2 = 'FAILED' THEN now() END)`), id, status)
	require.NoError(t, err)
	return id
}

func outboxStatus(t *testing.T, db *pgtest.DB, id string) string {
	t.Helper()
	var s string
	require.NoError(t, db.Pool.QueryRow(context.Background(), db.Q(`SELECT status FROM /*schema*/tributary_outbox WHERE id = $1`), id).Scan(&s))
	return s
}

func insertSchedule(t *testing.T, db *pgtest.DB, name string) {
	t.Helper()
	_, err := db.Pool.Exec(context.Background(), db.Q(`INSERT INTO /*schema*/tributary_schedule
		(name, spec, timezone, kind, args, insert_opts, catch_up, catch_up_max, overlap, next_run_at,
		 fired_count, skipped_count, paused, declared_at, created_at, updated_at)
		VALUES ($1, '0 3 * * *', 'UTC', 'test.noop', '{}', '{}', 'skip', 1, 'allow', now() + interval '1 hour',
		 0, 0, false, now(), now(), now())`), name)
	require.NoError(t, err)
}

func schedulePaused(t *testing.T, db *pgtest.DB, name string) bool {
	t.Helper()
	var p bool
	require.NoError(t, db.Pool.QueryRow(context.Background(), db.Q(`SELECT paused FROM /*schema*/tributary_schedule WHERE name = $1`), name).Scan(&p))
	return p
}

func TestOutboxPageAndReplay(t *testing.T) {
	t.Parallel()
	_, bundle := setupServer(t, Config{Token: testToken})
	auth := []string{"Authorization", "Bearer " + testToken}
	failed := insertOutboxRow(t, bundle.db, "FAILED")
	failed2 := insertOutboxRow(t, bundle.db, "FAILED")
	pending := insertOutboxRow(t, bundle.db, "PENDING")

	res := get(t, bundle.http.URL, "/api/outbox?status=failed")
	require.Equal(t, http.StatusOK, res.status, res.body)
	var page OutboxPage
	res.json(t, &page)
	require.True(t, page.Enabled)
	require.Len(t, page.Rows, 2)
	require.Equal(t, queue.Count{N: 2}, page.Counts["FAILED"])
	require.Equal(t, queue.Count{N: 1}, page.Counts["PENDING"])
	require.Contains(t, get(t, bundle.http.URL, "/outbox").body, "broker said no")

	// Without the token nothing changes.
	require.Equal(t, http.StatusUnauthorized, post(t, bundle.http.URL, "/api/outbox/"+failed+"/replay", nil).status)
	require.Equal(t, http.StatusUnauthorized, post(t, bundle.http.URL, "/api/outbox/replay-failed", nil).status)
	require.Equal(t, "FAILED", outboxStatus(t, bundle.db, failed))

	res = post(t, bundle.http.URL, "/api/outbox/"+failed+"/replay", nil, auth...)
	require.Equal(t, http.StatusOK, res.status, res.body)
	require.JSONEq(t, `{"replayed": 1}`, res.body)
	require.Equal(t, "PENDING", outboxStatus(t, bundle.db, failed))

	res = post(t, bundle.http.URL, "/api/outbox/"+pending+"/replay", nil, auth...)
	require.Equal(t, http.StatusConflict, res.status, "a PENDING row is not replayable")
	res = post(t, bundle.http.URL, "/api/outbox/"+uuid.NewString()+"/replay", nil, auth...)
	require.Equal(t, http.StatusConflict, res.status)
	require.Contains(t, res.body, "not found")
	res = post(t, bundle.http.URL, "/api/outbox/not-a-uuid/replay", nil, auth...)
	require.Equal(t, http.StatusBadRequest, res.status)
	require.Contains(t, res.body, `invalid outbox id \"not-a-uuid\"`)

	res = post(t, bundle.http.URL, "/api/outbox/replay-failed", nil, auth...)
	require.Equal(t, http.StatusOK, res.status, res.body)
	require.JSONEq(t, `{"replayed": 1}`, res.body)
	require.Equal(t, "PENDING", outboxStatus(t, bundle.db, failed2))
}

func TestSchedulesPageAndActions(t *testing.T) {
	t.Parallel()
	_, bundle := setupServer(t, Config{Token: testToken})
	auth := []string{"Authorization", "Bearer " + testToken}
	insertSchedule(t, bundle.db, "nightly report")

	res := get(t, bundle.http.URL, "/api/schedules")
	require.Equal(t, http.StatusOK, res.status, res.body)
	var page struct {
		Enabled   bool `json:"enabled"`
		Schedules []struct {
			Name   string `json:"name"`
			Paused bool   `json:"paused"`
		} `json:"schedules"`
	}
	res.json(t, &page)
	require.True(t, page.Enabled)
	require.Len(t, page.Schedules, 1)
	require.Equal(t, "nightly report", page.Schedules[0].Name)

	path := "/api/schedules/" + "nightly%20report"
	require.Equal(t, http.StatusUnauthorized, post(t, bundle.http.URL, path+"/pause", nil).status)
	require.False(t, schedulePaused(t, bundle.db, "nightly report"))

	res = post(t, bundle.http.URL, path+"/pause", nil, auth...)
	require.Equal(t, http.StatusOK, res.status, res.body)
	require.True(t, schedulePaused(t, bundle.db, "nightly report"))
	res = post(t, bundle.http.URL, path+"/resume", nil, auth...)
	require.Equal(t, http.StatusOK, res.status, res.body)
	require.False(t, schedulePaused(t, bundle.db, "nightly report"))

	before := bundle.db.CountJobs(t)
	res = post(t, bundle.http.URL, path+"/trigger", nil, auth...)
	require.Equal(t, http.StatusOK, res.status, res.body)
	var trig scheduleActionResult
	res.json(t, &trig)
	require.NotZero(t, trig.JobID)
	require.Equal(t, before+1, bundle.db.CountJobs(t))
	require.Equal(t, "available", jobState(t, bundle.db, trig.JobID))

	require.Equal(t, http.StatusNotFound, post(t, bundle.http.URL, "/api/schedules/nope/trigger", nil, auth...).status)
	require.Equal(t, http.StatusNotFound, post(t, bundle.http.URL, path+"/explode", nil, auth...).status)

	html := get(t, bundle.http.URL, "/schedules")
	require.Equal(t, http.StatusOK, html.status)
	require.Contains(t, html.body, "nightly report")
	require.Contains(t, html.body, fmt.Sprintf(`href="/jobs/%d"`, trig.JobID))
}
