package dashboard

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/internal/servicetest"
	"github.com/tributary-run/tributary/queue"
)

type testBundle struct {
	db     *pgtest.DB
	client *queue.Client
	http   *httptest.Server
}

// setupServer builds a dashboard on a fresh schema, served by httptest.
func setupServer(t *testing.T, cfg Config) (*Server, *testBundle) {
	t.Helper()
	db := pgtest.New(t)
	client := db.Client(t)
	if cfg.Logger == nil {
		cfg.Logger = pgtest.Logger(t)
	}
	srv, err := New(client, cfg)
	require.NoError(t, err)
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	return srv, &testBundle{db: db, client: client, http: hs}
}

// insertJob writes a river_job row directly, for states a test cannot
// reach quickly by working jobs.
func insertJob(t *testing.T, db *pgtest.DB, kind, q, state string) int64 {
	t.Helper()
	var finalized *time.Time
	now := time.Now()
	switch state {
	case "completed", "discarded", "cancelled":
		finalized = &now
	}
	scheduled := now.Add(-time.Minute)
	if state == "scheduled" {
		scheduled = now.Add(time.Hour)
	}
	var id int64
	err := db.Pool.QueryRow(context.Background(), db.Q(`
		INSERT INTO /*schema*/river_job (state, attempt, max_attempts, kind, queue, args, created_at, scheduled_at, finalized_at, priority)
		VALUES ($1::/*schema*/river_job_state, 0, 25, $2, $3, '{"n": 1}', $4, $5, $6, 1) RETURNING id`),
		state, kind, q, now.Add(-2*time.Minute), scheduled, finalized).Scan(&id)
	require.NoError(t, err)
	return id
}

// noRedirect is an HTTP client that returns redirects instead of following
// them.
func noRedirect() *http.Client {
	return &http.Client{
		Timeout:       30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

type response struct {
	status int
	body   string
	header http.Header
}

func (r response) json(t *testing.T, v any) {
	t.Helper()
	require.NoError(t, json.Unmarshal([]byte(r.body), v), "body: %s", r.body)
}

func do(t *testing.T, req *http.Request) response {
	t.Helper()
	res, err := noRedirect().Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return response{status: res.StatusCode, body: string(b), header: res.Header}
}

func get(t *testing.T, base, path string) response {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, base+path, nil)
	require.NoError(t, err)
	return do(t, req)
}

// post sends a form POST with optional headers (name, value pairs).
func post(t *testing.T, base, path string, form url.Values, headers ...string) response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+path, strings.NewReader(form.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	return do(t, req)
}

func jobState(t *testing.T, db *pgtest.DB, id int64) string {
	t.Helper()
	s, err := db.JobState(context.Background(), id)
	require.NoError(t, err)
	return string(s)
}

func TestServiceContract(t *testing.T) {
	t.Parallel()
	servicetest.Run(t, "dashboard.Service", func(t *testing.T) (queue.Service, error) {
		return NewService("127.0.0.1:0", http.NotFoundHandler(), pgtest.Logger(t)), nil
	})
	servicetest.Run(t, "dashboard.JobMetrics", func(t *testing.T) (queue.Service, error) {
		db := pgtest.New(t)
		rt, err := queue.NewRuntime(db.Pool, queue.RuntimeConfig{Schema: db.Schema, Logger: pgtest.Logger(t)})
		return NewJobMetrics(rt), err
	})
}
