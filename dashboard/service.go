package dashboard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/tributary-run/tributary/queue"
)

// Service serves a handler over HTTP as a queue.Service: Start listens
// (so a taken port fails the start) and serves in the background; Stop
// shuts down gracefully within its context's deadline.
type Service struct {
	addr    string
	handler http.Handler
	logger  *slog.Logger

	mu       sync.Mutex
	server   *http.Server
	listener net.Listener
	done     chan error
}

// NewService returns an HTTP service for handler on addr.
func NewService(addr string, handler http.Handler, logger *slog.Logger) *Service {
	if logger == nil {
		logger = slog.Default()
	}
	return &Service{addr: addr, handler: handler, logger: logger}
}

// Name implements queue.Service.
func (s *Service) Name() string { return "dashboard http" }

// Addr returns the address the service listens on once started (useful with
// port 0), else the configured address.
func (s *Service) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.listener != nil {
		return s.listener.Addr().String()
	}
	return s.addr
}

// Start listens on the address and serves in the background.
func (s *Service) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.server != nil {
		return errors.New("dashboard http already started")
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", s.addr)
	if err != nil {
		return fmt.Errorf("error listening on %s: %w", s.addr, err)
	}
	s.listener = ln
	s.server = &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
	}
	s.done = make(chan error, 1)
	srv, done := s.server, s.done
	go func() {
		err := srv.Serve(ln)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		done <- err
	}()
	s.logger.InfoContext(ctx, "dashboard listening", "addr", ln.Addr().String())
	return nil
}

// Stop stops accepting connections and waits for requests in flight until
// ctx ends, then closes what is left.
func (s *Service) Stop(ctx context.Context) error {
	s.mu.Lock()
	srv, done := s.server, s.done
	s.server, s.done = nil, nil
	s.mu.Unlock()
	if srv == nil {
		return nil
	}
	err := srv.Shutdown(ctx)
	if err != nil {
		_ = srv.Close()
	}
	if serveErr := <-done; serveErr != nil && err == nil {
		err = serveErr
	}
	return err
}

// InstallWorker adds the dashboard to a worker runtime: job metrics from
// River's events, then the HTTP server on cfg.Addr. It returns the server
// so the caller can register more collectors before Start.
func InstallWorker(rt *queue.Runtime, cfg Config) (*Server, *Service, error) {
	jm := NewJobMetrics(rt)
	cfg.Collectors = append(cfg.Collectors, jm)
	srv, err := New(rt.Client, cfg)
	if err != nil {
		return nil, nil, err
	}
	if err := rt.AddService(jm); err != nil {
		return nil, nil, err
	}
	svc := NewService(srv.cfg.Addr, srv.Handler(), srv.logger)
	if err := rt.AddService(svc); err != nil {
		return nil, nil, err
	}
	return srv, svc, nil
}
