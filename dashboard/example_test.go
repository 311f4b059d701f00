package dashboard_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tributary-run/tributary/dashboard"
	"github.com/tributary-run/tributary/queue"
)

// The dashboard is one http.Handler on a client's pool and schema. Without
// a token it is read-only: every action answers 403.
func ExampleNew() {
	// The pool connects lazily: building the dashboard needs no database,
	// and neither do /healthz and a refused action.
	pool := must(pgxpool.New(context.Background(), "postgres://127.0.0.1:5432/app"))
	defer pool.Close()
	srv := must(dashboard.New(must(queue.NewClient(pool, queue.ClientConfig{})), dashboard.Config{}))
	for _, req := range []*http.Request{
		httptest.NewRequest(http.MethodGet, "/healthz", nil),
		httptest.NewRequest(http.MethodPost, "/api/outbox/replay-failed", nil),
	} {
		rec := httptest.NewRecorder()
		srv.Handler().ServeHTTP(rec, req)
		fmt.Println(req.Method, req.URL.Path, rec.Code, strings.Join(strings.Fields(rec.Body.String()), " "))
	}
	// Output:
	// GET /healthz 200 { "status": "ok" }
	// POST /api/outbox/replay-failed 403 { "error": "the dashboard is read-only: set TRIBUTARY_DASHBOARD_TOKEN to enable actions" }
}

// Inside a worker process the dashboard is two services added last (so the
// HTTP server stops first): River's job event counters and the server.
func ExampleInstallWorker() {
	install := func(rt *queue.Runtime) error {
		_, _, err := dashboard.InstallWorker(rt, dashboard.Config{Addr: "127.0.0.1:8080", Token: "a long random token"})
		return err
	}
	_ = install // runs in a worker's runtime, so it is compiled, not run
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
