package queue

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"

	"github.com/tributary-run/tributary/migrations"
)

// QueueMaxWorkersDefault is the concurrency of a queue that gives none.
const QueueMaxWorkersDefault = 100

// HardStopGraceDefault is how long Stop waits for cancelled jobs to return
// and their results to be written after the shutdown timeout expired.
const HardStopGraceDefault = 5 * time.Second

// RuntimeConfig configures a Runtime.
type RuntimeConfig struct {
	// Schema holds River's and tributary's tables. Defaults to "public".
	Schema string

	// Logger for the runtime, its services and River.
	//
	// Defaults to slog.Default().
	Logger *slog.Logger

	// Queues maps each queue to work to its maximum concurrent jobs.
	//
	// Defaults to {"default": 100}.
	Queues map[string]int

	// ShutdownTimeout is how long running jobs get to finish once Stop is
	// called. Jobs still running after it are cancelled; a job that returns
	// because of that cancellation is snoozed, not failed, so it runs again
	// without spending an attempt.
	//
	// Defaults to 30 seconds.
	ShutdownTimeout time.Duration

	// FetchCooldown is the minimum time between two fetches of one queue;
	// FetchPollInterval is how often a queue is polled when no notification
	// arrives.
	//
	// Default to River's (100 ms and 1 s).
	FetchCooldown     time.Duration
	FetchPollInterval time.Duration

	// RescueStuckJobsAfter is how long a job may stay running before it is
	// considered abandoned by a crashed process and made available again.
	//
	// Defaults to River's (1 hour).
	RescueStuckJobsAfter time.Duration

	// CompletedJobRetention, CancelledJobRetention and DiscardedJobRetention
	// are how long finalized jobs are kept before River deletes them. -1
	// keeps them forever.
	//
	// Default to River's (24 hours, 24 hours, 7 days).
	CompletedJobRetention time.Duration
	CancelledJobRetention time.Duration
	DiscardedJobRetention time.Duration

	// JobTimeout bounds a single job run. -1 disables it.
	//
	// Defaults to River's (1 minute).
	JobTimeout time.Duration

	// ID identifies this process among replicas. Defaults to River's, derived
	// from the host name and start time.
	ID string

	// Middleware wrap every job this runtime works, outside the runtime's
	// own (the first is the outermost), so they see each job's final result
	// (jobs/workflow's Coordinator records task outcomes this way).
	//
	// Defaults to none.
	Middleware []rivertype.Middleware

	// RiverConfigFunc may adjust River's configuration after tributary
	// filled it; it is the escape hatch for settings tributary does not
	// expose.
	RiverConfigFunc func(cfg *river.Config)
}

// Runtime owns a worker process: the River client that works jobs, the
// registry of workers, and the lifecycle of every Service added to it. It
// also is a Client, so the process can enqueue through it.
type Runtime struct {
	*Client

	cfg     RuntimeConfig
	workers *river.Workers

	mu       sync.Mutex
	services []Service
	started  []Service
	running  bool

	hardStopping      atomic.Bool
	softStopCancel    context.CancelFunc // set while River's soft stop runs
	hardStopRequested bool               // HardStop was called
}

// RuntimeConfigFrom fills the runtime settings that come from the
// environment; the caller adds queues and anything else.
func RuntimeConfigFrom(cfg Config, logger *slog.Logger) RuntimeConfig {
	return RuntimeConfig{
		Schema:                cfg.Schema,
		Logger:                logger,
		ShutdownTimeout:       cfg.ShutdownTimeout,
		RescueStuckJobsAfter:  cfg.RescueStuckJobsAfter,
		CompletedJobRetention: cfg.CompletedJobRetention,
		CancelledJobRetention: cfg.CancelledJobRetention,
		DiscardedJobRetention: cfg.DiscardedJobRetention,
	}
}

// NewRuntime builds a runtime on pool. Register workers and add services,
// then call Start (or Run).
func NewRuntime(pool *pgxpool.Pool, cfg RuntimeConfig) (*Runtime, error) {
	cfg.Schema = cmp.Or(cfg.Schema, SchemaDefault)
	if err := migrations.ValidateSchemaName(cfg.Schema); err != nil {
		return nil, err
	}
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	cfg.ShutdownTimeout = cmp.Or(cfg.ShutdownTimeout, ShutdownTimeoutDefault)
	if len(cfg.Queues) == 0 {
		cfg.Queues = map[string]int{river.QueueDefault: QueueMaxWorkersDefault}
	}
	for name, n := range cfg.Queues {
		if n < 1 || n > river.QueueNumWorkersMax {
			return nil, fmt.Errorf("invalid worker count %d for queue %q: want 1 to %d", n, name, river.QueueNumWorkersMax)
		}
	}

	rt := &Runtime{cfg: cfg, workers: river.NewWorkers()}
	queues := make(map[string]river.QueueConfig, len(cfg.Queues))
	for name, n := range cfg.Queues {
		queues[name] = river.QueueConfig{MaxWorkers: n}
	}
	rcfg := &river.Config{
		Schema:                      cfg.Schema,
		Logger:                      cfg.Logger,
		Queues:                      queues,
		Workers:                     rt.workers,
		FetchCooldown:               cfg.FetchCooldown,
		FetchPollInterval:           cfg.FetchPollInterval,
		RescueStuckJobsAfter:        cfg.RescueStuckJobsAfter,
		CompletedJobRetentionPeriod: cfg.CompletedJobRetention,
		CancelledJobRetentionPeriod: cfg.CancelledJobRetention,
		DiscardedJobRetentionPeriod: cfg.DiscardedJobRetention,
		JobTimeout:                  cfg.JobTimeout,
		ID:                          cfg.ID,
		Middleware:                  []rivertype.Middleware{river.WorkerMiddlewareFunc(rt.snoozeOnHardStop)},
	}
	rcfg.Middleware = append(append([]rivertype.Middleware(nil), cfg.Middleware...), rcfg.Middleware...)
	if cfg.RiverConfigFunc != nil {
		cfg.RiverConfigFunc(rcfg)
	}
	rc, err := river.NewClient(riverpgxv5.New(pool), rcfg)
	if err != nil {
		return nil, fmt.Errorf("error creating River client: %w", err)
	}
	rt.Client = &Client{pool: pool, river: rc, schema: cfg.Schema, logger: cfg.Logger}
	return rt, nil
}

// snoozeOnHardStop turns a job that returned because the shutdown cancelled
// it into a snooze, so it is available again at once and the interruption
// does not count as a failed attempt.
func (rt *Runtime) snoozeOnHardStop(ctx context.Context, job *rivertype.JobRow, doInner func(ctx context.Context) error) error {
	err := doInner(ctx)
	if err != nil && ctx.Err() != nil && rt.hardStopping.Load() {
		rt.logger.WarnContext(ctx, "job interrupted by shutdown, will run again", "job_id", job.ID, "kind", job.Kind)
		return river.JobSnooze(0)
	}
	return err
}

// Workers returns the worker registry, for river.AddWorker.
func (rt *Runtime) Workers() *river.Workers { return rt.workers }

// AddWorker registers a worker for its job kind on rt. Register every
// worker before Start.
func AddWorker[T river.JobArgs](rt *Runtime, w river.Worker[T]) {
	river.AddWorker(rt.workers, w)
}

// AddService appends a service. Services start in the order they were
// added, after the River client, and stop in reverse order before it.
func (rt *Runtime) AddService(svc Service) error {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.running {
		return fmt.Errorf("cannot add service %q: the runtime is already running", svc.Name())
	}
	rt.services = append(rt.services, svc)
	return nil
}

// Start starts the River client, then every service in order. If one fails
// to start, those already started are stopped again and the error returned.
func (rt *Runtime) Start(ctx context.Context) error {
	rt.mu.Lock()
	if rt.running {
		rt.mu.Unlock()
		return errors.New("runtime already started")
	}
	rt.running = true
	all := append([]Service{&riverService{rt: rt}}, rt.services...)
	rt.mu.Unlock()

	for _, svc := range all {
		rt.logger.DebugContext(ctx, "starting service", "service", svc.Name())
		if err := svc.Start(ctx); err != nil {
			stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rt.cfg.ShutdownTimeout)
			defer cancel()
			_ = rt.stopStarted(stopCtx)
			return fmt.Errorf("error starting %s: %w", svc.Name(), err)
		}
		rt.mu.Lock()
		rt.started = append(rt.started, svc)
		rt.mu.Unlock()
	}
	rt.logger.InfoContext(ctx, "runtime started", "schema", rt.schema, "queues", rt.cfg.Queues, "services", len(all))
	return nil
}

// Stop stops every started service in reverse order, River last. Running
// jobs get ShutdownTimeout to finish; then they are cancelled and run again
// later. ctx bounds the whole stop.
func (rt *Runtime) Stop(ctx context.Context) error {
	err := rt.stopStarted(ctx)
	rt.logger.InfoContext(ctx, "runtime stopped")
	return err
}

func (rt *Runtime) stopStarted(ctx context.Context) error {
	rt.mu.Lock()
	started := rt.started
	rt.started = nil
	rt.running = false
	rt.mu.Unlock()

	var errs []error
	for i := len(started) - 1; i >= 0; i-- {
		svc := started[i]
		rt.logger.DebugContext(ctx, "stopping service", "service", svc.Name())
		if err := svc.Stop(ctx); err != nil {
			errs = append(errs, fmt.Errorf("error stopping %s: %w", svc.Name(), err))
		}
	}
	return errors.Join(errs...)
}

// Run starts the runtime, waits for ctx to end or for SIGINT/SIGTERM, and
// stops it: no new jobs are fetched, running jobs get ShutdownTimeout to
// finish, the rest are cancelled to run again later. It returns nil after a
// clean stop.
func (rt *Runtime) Run(ctx context.Context) error {
	sigCtx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	// Start on ctx, not sigCtx: a signal that arrives while services are
	// still starting must not fail their start (and the process with exit
	// 1); it is seen right after, and the runtime stops cleanly.
	if err := rt.Start(ctx); err != nil {
		return err
	}
	// Listen for the second signal before the first one's listener goes, so
	// no signal falls between the two and kills the process.
	second := make(chan os.Signal, 1)
	signal.Notify(second, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(second)
	<-sigCtx.Done()
	stop()
	select { // the first signal was delivered to both listeners
	case <-second:
	default:
	}
	rt.logger.InfoContext(ctx, "shutting down; a second signal cancels running jobs at once", "timeout", rt.cfg.ShutdownTimeout)

	// A second signal skips the rest of the soft stop.
	stopped := make(chan struct{})
	defer close(stopped)
	go func() {
		select {
		case <-second:
			rt.logger.WarnContext(ctx, "second signal: cancelling running jobs now")
			rt.HardStop()
		case <-stopped:
		}
	}()

	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rt.cfg.ShutdownTimeout+HardStopGraceDefault+5*time.Second)
	defer cancel()
	return rt.Stop(stopCtx)
}

// HardStop ends the soft part of a stop: running jobs are cancelled now
// instead of after ShutdownTimeout. Called before River's turn in a stop
// (while other services are still stopping), it makes that turn skip the
// soft part.
func (rt *Runtime) HardStop() {
	rt.mu.Lock()
	rt.hardStopRequested = true
	cancel := rt.softStopCancel
	rt.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}

// riverService adapts the River client to the Service lifecycle.
type riverService struct{ rt *Runtime }

func (s *riverService) Name() string { return "river" }

func (s *riverService) Start(ctx context.Context) error {
	// River derives its fetch loops from this context; give it one that the
	// start context's cancellation does not end, since Stop ends it.
	return s.rt.river.Start(context.WithoutCancel(ctx))
}

func (s *riverService) Stop(ctx context.Context) error {
	softCtx, cancel := context.WithTimeout(ctx, s.rt.cfg.ShutdownTimeout)
	defer cancel()
	s.rt.mu.Lock()
	s.rt.softStopCancel = cancel
	if s.rt.hardStopRequested {
		cancel()
	}
	s.rt.mu.Unlock()
	err := s.rt.river.Stop(softCtx)
	if err == nil {
		return nil
	}
	if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
		return err
	}
	s.rt.logger.WarnContext(ctx, "shutdown timeout reached, cancelling running jobs", "timeout", s.rt.cfg.ShutdownTimeout)
	s.rt.hardStopping.Store(true)
	hardCtx, cancelHard := context.WithTimeout(context.WithoutCancel(ctx), HardStopGraceDefault)
	defer cancelHard()
	return s.rt.river.StopAndCancel(hardCtx)
}
