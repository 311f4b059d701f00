package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
)

// otlpReceiver is an OTLP/HTTP endpoint that records what it is sent.
type otlpReceiver struct {
	mu    sync.Mutex
	paths []string
	bytes int
}

func startOTLPReceiver(t *testing.T) (*otlpReceiver, string) {
	t.Helper()
	r := &otlpReceiver{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.paths = append(r.paths, req.Method+" "+req.URL.Path+" "+req.Header.Get("Content-Type"))
		r.bytes += len(body)
		r.mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	return r, srv.URL
}

func (r *otlpReceiver) snapshot() ([]string, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.paths...), r.bytes
}

// Traces are exported only when OTEL_EXPORTER_OTLP_ENDPOINT is set: the
// enqueue's River insert span reaches the endpoint before the process exits.
func TestCLIExportsTracesOnlyWithOTLPEndpoint(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	recv, url := startOTLPReceiver(t)

	res := cli(t, db, nil, "enqueue", "demo.noop", "{}")
	require.Equal(t, exitOK, res.code, "stderr: %s", res.stderr)
	paths, _ := recv.snapshot()
	require.Empty(t, paths, "nothing is exported without the variable")

	res = cli(t, db, []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + url}, "enqueue", "demo.noop", "{}")
	require.Equal(t, exitOK, res.code, "stderr: %s", res.stderr)
	paths, n := recv.snapshot()
	require.Equal(t, []string{"POST /v1/traces application/x-protobuf"}, paths)
	require.Positive(t, n)

	res = cli(t, db, []string{"OTEL_EXPORTER_OTLP_ENDPOINT=localhost:4318"}, "stats")
	require.Equal(t, exitUsage, res.code)
	oneSentence(t, res.stderr)
	require.Contains(t, res.stderr, "OTEL_EXPORTER_OTLP_ENDPOINT")
	require.Contains(t, res.stderr, "localhost:4318")
}
