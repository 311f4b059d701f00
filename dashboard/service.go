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

	life queue.Lifecycle

	mu       sync.Mutex
	listener net.Listener // the last one opened, for Addr
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
	return s.life.Start(ctx, s.Name(), func(run *queue.Run) error {
		var lc net.ListenConfig
		ln, err := lc.Listen(ctx, "tcp", s.addr)
		if err != nil {
			return fmt.Errorf("error listening on %s: %w", s.addr, err)
		}
		s.mu.Lock()
		s.listener = ln
		s.mu.Unlock()
		srv := &http.Server{
			Handler:           s.handler,
			ReadHeaderTimeout: 10 * time.Second,
			ReadTimeout:       30 * time.Second,
			WriteTimeout:      60 * time.Second,
			IdleTimeout:       2 * time.Minute,
			MaxHeaderBytes:    64 << 10,
		}
		run.Go(func() {
			// Serve ends early only when the listener fails; nobody waits
			// for its result then, so it is logged.
			if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
				s.logger.ErrorContext(run.Context(), "dashboard stopped serving", "addr", ln.Addr().String(), "error", err)
			}
		})
		// Shutdown stops accepting and waits for requests in flight until
		// the stop's deadline; what is left then is closed.
		run.OnStop(func(ctx context.Context) error {
			err := srv.Shutdown(ctx)
			if err != nil {
				_ = srv.Close()
			}
			return err
		})
		s.logger.InfoContext(ctx, "dashboard listening", "addr", ln.Addr().String())
		return nil
	})
}

// Stop stops accepting connections and waits for requests in flight until
// ctx ends, then closes what is left.
func (s *Service) Stop(ctx context.Context) error {
	_, err := s.life.Stop(ctx)
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
