package dashboard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tributary-run/tributary/jobs/events"
	"github.com/tributary-run/tributary/queue"
)

// Server is the dashboard: its read models, actions and HTTP handler. It is
// safe for concurrent use.
type Server struct {
	cfg      Config
	client   *queue.Client
	pool     *pgxpool.Pool
	schema   string
	logger   *slog.Logger
	registry *prometheus.Registry
	pages    *pages
	auth     *authenticator
	handler  http.Handler

	throughput *throughputCache
	pending    *agedRead[map[string]int64]
	counts     *agedRead[*metricsCounts]
}

// New builds a dashboard on client's pool and schema. Job actions go
// through client's River client.
func New(client *queue.Client, cfg Config) (*Server, error) {
	if client == nil {
		return nil, errors.New("dashboard needs a tributary client")
	}
	cfg = cfg.withDefaults(client.Logger())
	s := &Server{
		cfg:    cfg,
		client: client,
		pool:   client.Pool(),
		schema: client.Schema(),
		logger: cfg.Logger,
		auth:   newAuthenticator(cfg, client.Pool(), client.Schema()),

		throughput: &throughputCache{},
	}
	s.pending = &agedRead[map[string]int64]{s: s, maxAge: cfg.PendingDispatchesMaxAge, what: "the event consumers' pending dispatches",
		read: func(ctx context.Context, tx pgx.Tx) (map[string]int64, error) {
			return events.CountPendingDispatches(ctx, tx, s.schema)
		}}
	s.counts = &agedRead[*metricsCounts]{s: s, maxAge: cfg.MetricsCountsMaxAge, what: "the job and workflow counts of /metrics", read: s.readMetricsCounts}
	var err error
	if s.pages, err = loadPages(); err != nil {
		return nil, err
	}
	s.registry = cfg.Registry
	if s.registry == nil {
		s.registry = prometheus.NewRegistry()
		s.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	if err := s.registry.Register(newDBCollector(s)); err != nil {
		return nil, fmt.Errorf("error registering the dashboard's database metrics: %w", err)
	}
	for _, c := range cfg.Collectors {
		if err := s.registry.Register(c); err != nil {
			return nil, fmt.Errorf("error registering a metrics collector: %w", err)
		}
	}
	s.handler = s.routes()
	return s, nil
}

// Handler returns the dashboard's HTTP handler.
func (s *Server) Handler() http.Handler { return s.handler }

// Registry returns the registry served on /metrics.
func (s *Server) Registry() *prometheus.Registry { return s.registry }

// ReadOnly reports whether actions are disabled (no token configured).
func (s *Server) ReadOnly() bool { return s.auth.readOnly() }

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	page := func(pattern string, h handlerFunc) {
		// Every page also answers as JSON under /api/.
		_, path, _ := strings.Cut(pattern, " ")
		mux.Handle(pattern, s.wrap(h))
		mux.Handle("GET /api"+path, s.wrap(h))
	}
	page("GET /{$}", s.handleOverview)
	mux.Handle("GET /api/overview", s.wrap(s.handleOverview))
	page("GET /jobs", s.handleJobs)
	page("GET /jobs/{id}", s.handleJob)
	page("GET /outbox", s.handleOutbox)
	page("GET /schedules", s.handleSchedules)
	page("GET /batches", s.handleBatches)
	page("GET /amqp", s.handleAMQP)
	page("GET /lanes", s.handleLanes)
	page("GET /consumers", s.handleConsumers)
	page("GET /workflows", s.handleWorkflows)
	page("GET /workflows/{id}", s.handleWorkflow)
	page("GET /limits", s.handleLimits)

	action := func(pattern string, h handlerFunc) {
		path := strings.TrimPrefix(pattern, "POST ")
		mux.Handle("POST "+path, s.wrap(s.requireAuth(h)))
		mux.Handle("POST /api"+path, s.wrap(s.requireAuth(h)))
	}
	action("POST /jobs/{id}/{action}", s.handleJobAction)
	action("POST /outbox/{id}/replay", s.handleOutboxReplay)
	action("POST /outbox/replay-failed", s.handleOutboxReplayFailed)
	action("POST /schedules/{name}/{action}", s.handleScheduleAction)
	action("POST /amqp/{queue}/replay", s.handleDLQReplay)
	action("POST /lanes/{consumer}/{aggregate}/{action}", s.handleLaneAction)
	action("POST /workflows/{id}/{action}", s.handleWorkflowAction)
	action("POST /limits/{name}/max", s.handleLimitMax)
	action("POST /limits/{name}/override", s.handleLimitOverride)

	mux.Handle("GET /login", s.wrap(s.handleLoginForm))
	mux.Handle("POST /login", s.wrap(s.handleLogin))
	mux.Handle("POST /logout", s.wrap(s.handleLogout))
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(staticFS())))
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.registry, promhttp.HandlerOpts{ErrorLog: slogErrorLog{s.logger}}))
	mux.HandleFunc("GET /healthz", s.handleHealthz)
	mux.HandleFunc("GET /readyz", s.handleReadyz)
	return s.logRequests(securityHeaders(mux))
}

// logRequests logs every request at debug level with its status and
// duration.
func (s *Server) logRequests(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.logger.Enabled(r.Context(), slog.LevelDebug) {
			next.ServeHTTP(w, r)
			return
		}
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		next.ServeHTTP(rec, r)
		s.logger.DebugContext(r.Context(), "dashboard request", "method", r.Method, "path", r.URL.Path,
			"status", rec.status, "duration", time.Since(start))
	})
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(status int) {
	r.status = status
	r.ResponseWriter.WriteHeader(status)
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// securityHeaders forbids framing (clickjacking of the action buttons),
// MIME sniffing and any script.
func securityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "same-origin")
		h.Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
		next.ServeHTTP(w, r)
	})
}

// slogErrorLog adapts slog to promhttp's error logger.
type slogErrorLog struct{ logger *slog.Logger }

func (l slogErrorLog) Println(v ...any) {
	l.logger.Error("error serving metrics", "error", fmt.Sprint(v...))
}

// isAPI reports whether a request wants JSON.
func isAPI(r *http.Request) bool { return strings.HasPrefix(r.URL.Path, "/api/") }
