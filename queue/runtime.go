package queue

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"os/signal"
	"strings"
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

// ShutdownTimeoutDefault is how long running jobs get to finish once a stop
// began.
const ShutdownTimeoutDefault = 30 * time.Second

// FetchCooldownDefault is the least time between two fetches of one queue
// by one process; FetchPollIntervalDefault how often a queue is polled
// when no notification arrives. River's own cooldown default, 100 ms,
// makes a queue of n workers fetch at most n jobs every 100 ms (1,000
// jobs/s per process with 100 workers) and has a job inserted while the
// queue is busy wait up to 100 ms for its fetch; at 5 ms the cap is twenty
// times higher and the wait at most 5 ms, for at most 200 fetches a second
// per queue and process while jobs keep coming (none while it is quiet:
// fetches follow the inserts' notifications and the poll).
// docs/ARCHITECTURE.md, "Fetching".
const (
	FetchCooldownDefault     = 5 * time.Millisecond
	FetchPollIntervalDefault = time.Second
)

// HardStopGraceDefault is how long Stop waits for cancelled jobs to return
// and their results to be written after the shutdown timeout expired.
const HardStopGraceDefault = 5 * time.Second

// lostStopGrace is how long River gets to wind down after the process lost
// its liveness: enough to flush results of jobs that ended before.
const lostStopGrace = time.Second

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

	// Workers is the registry of the job kinds' workers. Workers and
	// AddWorker add to it until Start.
	//
	// Defaults to a new, empty registry.
	Workers *river.Workers

	// ShutdownTimeout is how long running jobs get to finish once Stop is
	// called. Jobs still running after it are cancelled; a job that returns
	// because of that cancellation is snoozed, not failed, so it runs again
	// without spending an attempt.
	//
	// Defaults to 30 seconds.
	ShutdownTimeout time.Duration

	// FetchCooldown is the minimum time between two fetches of one queue;
	// FetchPollInterval is how often a queue is polled when no notification
	// arrives. FetchCooldown must be at least 1 ms and FetchPollInterval at
	// least FetchCooldown.
	//
	// Default to FetchCooldownDefault (5 ms, not River's 100 ms) and
	// FetchPollIntervalDefault (1 s, River's).
	FetchCooldown     time.Duration
	FetchPollInterval time.Duration

	// RescueStuckJobsAfter is how long a job may stay running before River's
	// rescuer takes it for abandoned and makes it available again. It must
	// not be less than JobTimeout. With liveness (LivenessTimeout), the jobs
	// of a crashed tributary process are made available long before; River's
	// rescuer remains for the jobs liveness does not judge (see
	// LivenessTimeout).
	//
	// Defaults to River's (1 hour).
	RescueStuckJobsAfter time.Duration

	// LivenessTimeout is how old this process's heartbeat may get before
	// other processes take it for dead and make its running jobs available
	// again. The process heartbeats every LivenessTimeout/6 into
	// tributary_process; it stops working (Run returns ErrLivenessLost) when
	// no heartbeat has reached the database for LivenessTimeout minus one
	// heartbeat interval, before anyone may hand its jobs on. Jobs attempted
	// by a River client with no row in tributary_process (a plain River
	// client sharing the schema) are left to River's rescuer.
	//
	// Defaults to LivenessTimeoutDefault (30 seconds); at least
	// LivenessTimeoutMin (1 second).
	LivenessTimeout time.Duration

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

	// ID identifies this process among replicas: it is River's client id
	// (written into river_job.attempted_by) and the key of the process's
	// liveness row. Two live processes must not share one; a process started
	// with the id of one that is still heartbeating waits up to about one
	// LivenessTimeout for it to go stale, then fails to start.
	//
	// Defaults to "tributary-<host>-<pid>-<random>".
	ID string

	// Middleware wrap every job this runtime works, outside the runtime's
	// own (the first is the outermost), so they see each job's final result
	// (jobs/workflow's Coordinator records task outcomes this way). River's
	// tracing middleware (trace.go) wraps them all.
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
	// queues are the queues River works, as RiverConfigFunc left them.
	queues map[string]int

	mu       sync.Mutex
	services []Service
	started  []Service
	running  bool

	hardStopping      atomic.Bool
	softStopCancel    context.CancelFunc      // set while River's soft stop runs
	riverStartCancel  context.CancelCauseFunc // ends River's start context (the jobs' contexts); set at River's start
	hardStopRequested bool                    // HardStop was called

	live *liveness
	// lostCtx is cancelled, with the cause, when the process lost its
	// liveness; so, through River's start context (riverStartCancel), are
	// the contexts of the jobs running then.
	lostCtx    context.Context
	loseCancel context.CancelCauseFunc
	inWork     runningSet // the jobs in River's Work (guardJob)
	// lostSuspects are the jobs the lost-jobs check's (lost_jobs.go) last
	// look found running under this id and not run here, with when each
	// was first seen; lostCheckedAt is that look's time and
	// lostBeatFailures the count of failed heartbeats then.
	lostSuspects     map[int64]time.Time // touched by the sweep loop only
	lostCheckedAt    time.Time
	lostBeatFailures uint64
	lossOnce         sync.Once
	lossDone         chan struct{} // closed once the stop after a loss finished
	lossErr          error         // the loss and that stop's errors; set before lossDone closes
}

// Validate checks cfg as NewRuntime would use it, defaults applied, and
// returns a *ConfigError naming the first bad field.
func (cfg RuntimeConfig) Validate() error {
	if err := migrations.ValidateSchemaName(cmp.Or(cfg.Schema, SchemaDefault)); err != nil {
		return &ConfigError{Name: "Schema", Value: cfg.Schema, Reason: err.Error()}
	}
	for name, n := range cfg.Queues {
		if n < 1 || n > river.QueueNumWorkersMax {
			return &ConfigError{Name: "Queues", Value: fmt.Sprintf("%s=%d", name, n), Reason: fmt.Sprintf("want 1 to %d workers", river.QueueNumWorkersMax)}
		}
	}
	if jobTimeout := cmp.Or(cfg.JobTimeout, river.JobTimeoutDefault); cfg.RescueStuckJobsAfter > 0 && jobTimeout > 0 && cfg.RescueStuckJobsAfter < jobTimeout {
		return &ConfigError{Name: "RescueStuckJobsAfter", Value: cfg.RescueStuckJobsAfter.String(),
			Reason: fmt.Sprintf("must not be less than the job timeout (JobTimeout %s), or River would rescue jobs still running within their timeout", jobTimeout)}
	}
	cooldown := cmp.Or(cfg.FetchCooldown, FetchCooldownDefault)
	if cooldown < river.FetchCooldownMin {
		return &ConfigError{Name: "FetchCooldown", Value: cfg.FetchCooldown.String(), Reason: "must be at least " + river.FetchCooldownMin.String()}
	}
	if poll := cmp.Or(cfg.FetchPollInterval, FetchPollIntervalDefault); poll < cooldown {
		return &ConfigError{Name: "FetchPollInterval", Value: cfg.FetchPollInterval.String(),
			Reason: fmt.Sprintf("must not be less than the fetch cooldown (FetchCooldown %s)", cooldown)}
	}
	if timeout := cmp.Or(cfg.LivenessTimeout, LivenessTimeoutDefault); timeout < LivenessTimeoutMin {
		return &ConfigError{Name: "LivenessTimeout", Value: timeout.String(), Reason: "must be at least " + LivenessTimeoutMin.String()}
	}
	return nil
}

// NewRuntime builds a runtime on pool. Register workers and add services,
// then call Start (or Run).
func NewRuntime(pool *pgxpool.Pool, cfg RuntimeConfig) (*Runtime, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.Schema = cmp.Or(cfg.Schema, SchemaDefault)
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	cfg.ShutdownTimeout = cmp.Or(cfg.ShutdownTimeout, ShutdownTimeoutDefault)
	if len(cfg.Queues) == 0 {
		cfg.Queues = map[string]int{river.QueueDefault: QueueMaxWorkersDefault}
	}
	cfg.LivenessTimeout = cmp.Or(cfg.LivenessTimeout, LivenessTimeoutDefault)
	cfg.FetchCooldown = cmp.Or(cfg.FetchCooldown, FetchCooldownDefault)
	cfg.FetchPollInterval = cmp.Or(cfg.FetchPollInterval, FetchPollIntervalDefault)
	cfg.ID = cmp.Or(cfg.ID, defaultProcessID())

	rt := &Runtime{cfg: cfg, workers: cmp.Or(cfg.Workers, river.NewWorkers()), lossDone: make(chan struct{})}
	rt.lostCtx, rt.loseCancel = context.WithCancelCause(context.Background())
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
	}
	// River's tracing outermost, then the caller's middleware, then the
	// runtime's guard; with no middleware of the caller's, the guard runs
	// inside the tracing layer instead of as a layer of its own.
	guard := river.WorkerMiddlewareFunc(rt.guardJob)
	if len(cfg.Middleware) == 0 {
		rcfg.Middleware = []rivertype.Middleware{newTracing(guard)}
	} else {
		rcfg.Middleware = append(append([]rivertype.Middleware{tracingMiddleware()}, cfg.Middleware...), guard)
	}
	if cfg.RiverConfigFunc != nil {
		cfg.RiverConfigFunc(rcfg)
	}
	rt.queues = make(map[string]int, len(rcfg.Queues))
	for name, q := range rcfg.Queues {
		rt.queues[name] = q.MaxWorkers
	}
	rc, err := river.NewClient(riverpgxv5.New(pool), rcfg)
	if err != nil {
		return nil, fmt.Errorf("error creating River client: %w", err)
	}
	// RiverConfigFunc may have set another id; the row must carry the one
	// River writes into attempted_by.
	rt.cfg.ID = rc.ID()
	rt.Client = &Client{pool: pool, river: rc, schema: cfg.Schema, logger: cfg.Logger, copy: newCopyInsert(rcfg)}
	rt.live = newLiveness(pool, cfg.Schema, cfg.Logger, rt.cfg.ID, sortedQueues(cfg.Queues), cfg.LivenessTimeout, rt.loseLiveness)
	rt.live.afterSweep = rt.checkLostJobs
	return rt, nil
}

// guardJob wraps every job. A job that returned because the shutdown
// cancelled it becomes a snooze, so it is available again at once and the
// interruption does not count as a failed attempt. And once the process
// has lost its liveness, jobs are cancelled and their results withheld (see
// withholdResult).
func (rt *Runtime) guardJob(ctx context.Context, job *rivertype.JobRow, doInner func(ctx context.Context) error) error {
	if rt.livenessLost() {
		rt.withholdResult(ctx, job)
	}
	// No context of its own: River derives ctx from the context River was
	// started with, which the loss of liveness cancels with its cause.
	rt.inWork.add(job.ID)
	defer rt.inWork.remove(job.ID)

	err := doInner(ctx)
	if rt.livenessLost() {
		rt.withholdResult(ctx, job)
	}
	if err != nil && ctx.Err() != nil && rt.hardStopping.Load() {
		rt.logger.WarnContext(ctx, "job interrupted by shutdown, will run again", "job_id", job.ID, "kind", job.Kind)
		return river.JobSnooze(0)
	}
	return err
}

// livenessLost reports whether the process may no longer work jobs. A
// heartbeat deadline that passed counts even before the heartbeat loop
// noticed (the process may just have woken from a pause).
func (rt *Runtime) livenessLost() bool {
	if rt.lostCtx.Err() != nil {
		return true
	}
	if rt.live.expired() && rt.live.running() {
		rt.live.lose(fmt.Errorf("%w: no heartbeat reached the database for %s (liveness timeout %s)", ErrLivenessLost, rt.live.sinceBeat().Round(time.Millisecond), rt.cfg.LivenessTimeout))
		return true
	}
	return false
}

// withholdResult never returns. Once the process lost its liveness, the
// job's row belongs to the sweep: another process may already be running
// it. Any result River wrote now (completed, retryable, snoozed) would land
// on that other attempt, since River's completion checks only that the job
// is running. So the job's goroutine parks until the process exits, and
// whatever of its row is left is made available again by this process's
// final liveness stop or by the sweep.
func (rt *Runtime) withholdResult(ctx context.Context, job *rivertype.JobRow) {
	rt.logger.ErrorContext(ctx, "job result withheld: this process lost its liveness, the job runs again elsewhere",
		"job_id", job.ID, "kind", job.Kind, "attempt", job.Attempt, "cause", context.Cause(rt.lostCtx))
	select {}
}

// loseLiveness stops the process's work after it lost its liveness: every
// running job is cancelled at once (their contexts carry the cause), and the
// runtime stops with no soft part, in the background; Run returns
// ErrLivenessLost once that stop finished.
func (rt *Runtime) loseLiveness(cause error) {
	rt.lossOnce.Do(func() {
		rt.logger.Error("stopping: this process can no longer show that it is alive, so its jobs will be run by others", "process_id", rt.cfg.ID, "cause", cause)
		rt.loseCancel(cause)
		// The running jobs' contexts end with River's start context
		// (riverService.Start), and have ended when this returns.
		rt.mu.Lock()
		cancelRiver := rt.riverStartCancel
		rt.mu.Unlock()
		if cancelRiver != nil {
			cancelRiver(cause)
		}
		go func() {
			rt.HardStop()
			ctx, cancel := context.WithTimeout(context.Background(), HardStopGraceDefault+5*time.Second)
			defer cancel()
			rt.lossErr = cause
			if err := rt.stopStarted(ctx); err != nil {
				// One line: the CLI prints this as its one sentence.
				rt.lossErr = fmt.Errorf("%w; then, stopping: %s", cause, strings.ReplaceAll(err.Error(), "\n", "; "))
			}
			close(rt.lossDone)
		}()
	})
}

// LivenessLost returns a channel that is closed once the process lost its
// liveness and the runtime stopped because of it (Run then returns an error
// wrapping ErrLivenessLost). A process that uses Start and Stop instead of
// Run should watch it and exit.
func (rt *Runtime) LivenessLost() <-chan struct{} { return rt.lossDone }

// ProcessID returns this process's id: River's client id, the value River
// writes into river_job.attempted_by, and the key of its tributary_process
// row.
func (rt *Runtime) ProcessID() string { return rt.cfg.ID }

// LivenessTimeout returns the heartbeat age past which this runtime takes a
// process for dead.
func (rt *Runtime) LivenessTimeout() time.Duration { return rt.cfg.LivenessTimeout }

// Queues returns the queues this runtime works, each with its maximum
// concurrent jobs (a copy; RuntimeConfig.RiverConfigFunc's changes
// included).
func (rt *Runtime) Queues() map[string]int { return maps.Clone(rt.queues) }

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
		return fmt.Errorf("runtime: %w", ErrAlreadyStarted)
	}
	rt.running = true
	// Liveness first and last: every job River fetches is attempted by a
	// process with a row, and the row goes only after River stopped.
	all := append([]Service{rt.live, &riverService{rt: rt}}, rt.services...)
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
		if rt.lostCtx.Err() != nil {
			// Lost while starting: the stop after the loss may already have
			// run and missed the services started since.
			stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), HardStopGraceDefault)
			defer cancel()
			_ = rt.stopStarted(stopCtx)
			return context.Cause(rt.lostCtx)
		}
	}
	rt.logger.InfoContext(ctx, "runtime started", "schema", rt.schema, "queues", rt.cfg.Queues, "services", len(all))
	return nil
}

// Stop stops every started service in reverse order, River last. Running
// jobs get ShutdownTimeout to finish; then they are cancelled and run again
// later. ctx bounds the whole stop.
func (rt *Runtime) Stop(ctx context.Context) error {
	err := rt.stopStarted(ctx)
	if rt.lostCtx.Err() != nil {
		// The stop after the loss took the services; its outcome is the
		// result.
		select {
		case <-rt.lossDone:
			err = rt.lossErr
		case <-ctx.Done():
			err = context.Cause(rt.lostCtx)
		}
	}
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
	select {
	case <-sigCtx.Done():
	case <-rt.lossDone:
		return rt.lossErr
	}
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
type riverService struct {
	rt   *Runtime
	life Lifecycle
}

func (s *riverService) Name() string { return "river" }

func (s *riverService) Start(ctx context.Context) error {
	return s.life.Start(ctx, s.Name(), func(run *Run) error {
		// River derives its fetch loops and every job's context from this
		// context, which the start context's cancellation does not end:
		// Stop ends River. The loss of liveness cancels it with its cause,
		// which River takes for StopAndCancel (with no SoftStopTimeout, its
		// work context inherits from it): every running job's context ends
		// at once and carries the cause, and nothing more is fetched.
		// loseLiveness cancels it once it is set; a loss before that (the
		// loss cancels lostCtx first, then reads the cancel under rt.mu) is
		// seen here.
		startCtx, cancel := context.WithCancelCause(run.Context())
		s.rt.mu.Lock()
		s.rt.riverStartCancel = cancel
		s.rt.mu.Unlock()
		if s.rt.lostCtx.Err() != nil {
			cancel(context.Cause(s.rt.lostCtx))
		}
		if err := s.rt.river.Start(startCtx); err != nil {
			cancel(nil)
			return err
		}
		run.OnStop(s.stopRiver)
		return nil
	})
}

func (s *riverService) Stop(ctx context.Context) error {
	_, err := s.life.Stop(ctx)
	return err
}

// stopRiver stops River softly within ShutdownTimeout, then cancels the jobs
// still running and gives them HardStopGraceDefault to return.
func (s *riverService) stopRiver(ctx context.Context) error {
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
	grace := HardStopGraceDefault
	if s.rt.lostCtx.Err() != nil {
		// Every job's result is withheld now (see withholdResult): none will
		// return, so waiting for them only delays the final rescue.
		grace = lostStopGrace
	} else {
		s.rt.logger.WarnContext(ctx, "shutdown timeout reached, cancelling running jobs", "timeout", s.rt.cfg.ShutdownTimeout)
	}
	s.rt.hardStopping.Store(true)
	hardCtx, cancelHard := context.WithTimeout(context.WithoutCancel(ctx), grace)
	defer cancelHard()
	return s.rt.river.StopAndCancel(hardCtx)
}
