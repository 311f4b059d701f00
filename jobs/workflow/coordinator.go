package workflow

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/tributary-run/tributary/migrations"
	"github.com/tributary-run/tributary/queue"
)

// RepairIntervalDefault is how often a Coordinator looks for tasks whose
// outcome was not recorded.
const RepairIntervalDefault = 30 * time.Second

// repairQuietFor is how long a task must have been unchanged before the
// repair sweep looks at it, so it never races a completion in flight.
const repairQuietFor = 10 * time.Second

// CoordinatorConfig configures a Coordinator.
type CoordinatorConfig struct {
	// Schema holds River's and tributary's tables.
	//
	// Defaults to "public".
	Schema string

	// Logger for the coordinator.
	//
	// Defaults to slog.Default().
	Logger *slog.Logger

	// OutputMaxBytes bounds the JSON of one task's output (SetOutput).
	//
	// Defaults to 256 KiB.
	OutputMaxBytes int

	// RepairInterval is how often the coordinator records the outcome of
	// tasks whose job finished without it (a job cancelled or deleted with
	// River's own API, a worker process without the middleware) and
	// decides tasks left undecided. By construction it finds nothing; it
	// is the safety net. -1 turns it off.
	//
	// Defaults to 30 seconds.
	RepairInterval time.Duration
}

// CoordinatorStats are a coordinator's counters since it was created.
type CoordinatorStats struct {
	Completed int64 `json:"completed"` // task completions recorded
	Failed    int64 `json:"failed"`    // task failures recorded
	Cancelled int64 `json:"cancelled"` // tasks whose job was cancelled remotely, recorded
	Stale     int64 `json:"stale"`     // outcomes dropped because the job had moved on (rescued, finalized elsewhere)
	Repaired  int64 `json:"repaired"`  // tasks the repair sweep changed
	Batches   int64 `json:"batches"`   // completion transactions committed
}

// Coordinator advances workflows in a worker process. Its River middleware
// (Middleware, to put in queue.RuntimeConfig.Middleware) wraps every job:
// for a workflow task it gives the task's context its workflow (Output,
// SetOutput), and when the job ends for good it records the outcome and
// releases, skips or cancels the dependents in one transaction, which
// finalizes a failed or cancelled task's job; River's completer completes a
// successful task's job after it. Register adds its repair sweep to the
// runtime.
//
//	coord, _ := workflow.NewCoordinator(pool, workflow.CoordinatorConfig{Schema: schema})
//	cfg.Middleware = append(cfg.Middleware, coord.Middleware())
//	rt, _ := queue.NewRuntime(pool, cfg)
//	_ = coord.Register(rt)
type Coordinator struct {
	pool   *pgxpool.Pool
	cfg    CoordinatorConfig
	logger *slog.Logger
	sql    statements

	completer *completer
	timers    timers

	riverMu sync.Mutex
	river   *river.Client[pgx.Tx] // the runtime's, for its snooze events (Register)

	completed, failed, cancelled, stale, repaired, batches atomic.Int64

	life queue.Lifecycle

	repairMu                     sync.Mutex
	repairCursor                 repairCursor // where the next repair pass continues
	repairWorkflows, repairTasks int          // a pass's page (repairWorkflows, repairTasks; smaller in tests)
}

// NewCoordinator returns a coordinator on pool.
func NewCoordinator(pool *pgxpool.Pool, cfg CoordinatorConfig) (*Coordinator, error) {
	cfg.Schema = cmp.Or(cfg.Schema, queue.SchemaDefault)
	if err := migrations.ValidateSchemaName(cfg.Schema); err != nil {
		return nil, err
	}
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	cfg.OutputMaxBytes = cmp.Or(cfg.OutputMaxBytes, OutputMaxBytesDefault)
	if cfg.OutputMaxBytes < 0 {
		return nil, fmt.Errorf("invalid OutputMaxBytes %d: must be positive", cfg.OutputMaxBytes)
	}
	cfg.RepairInterval = cmp.Or(cfg.RepairInterval, RepairIntervalDefault)
	c := &Coordinator{pool: pool, cfg: cfg, logger: cfg.Logger.With("component", "workflow"), sql: qualify(cfg.Schema),
		repairWorkflows: repairWorkflows, repairTasks: repairTasks}
	c.completer = &completer{c: c}
	c.timers.c = c
	return c, nil
}

// Middleware returns the River middleware that runs workflow tasks. Every
// process that works jobs of workflow tasks needs it; jobs that are not
// workflow tasks pass through untouched.
func (c *Coordinator) Middleware() rivertype.Middleware { return middleware{c} }

// Register adds the coordinator's repair sweep to rt as a service, and has
// it follow the snoozes of rt's jobs (River's snooze events): a task that
// waits for a signal sent while its job was still running is woken once
// River wrote its snooze, and a snooze that ends soon is woken by a timer
// rather than River's scheduler.
func (c *Coordinator) Register(rt *queue.Runtime) error {
	c.riverMu.Lock()
	c.river = rt.River()
	c.riverMu.Unlock()
	return rt.AddService(c)
}

// Stats returns the coordinator's counters.
func (c *Coordinator) Stats() CoordinatorStats {
	return CoordinatorStats{Completed: c.completed.Load(), Failed: c.failed.Load(), Cancelled: c.cancelled.Load(),
		Stale: c.stale.Load(), Repaired: c.repaired.Load(), Batches: c.batches.Load()}
}

// Name implements queue.Service.
func (c *Coordinator) Name() string { return "workflow coordinator" }

// Start starts the repair sweep.
func (c *Coordinator) Start(ctx context.Context) error {
	return c.life.Start(ctx, c.Name(), func(run *queue.Run) error {
		c.riverMu.Lock()
		rc := c.river
		c.riverMu.Unlock()
		if rc != nil {
			events, cancel := rc.Subscribe(river.EventKindJobSnoozed)
			c.timers.start(run.Stopping())
			run.Go(func() {
				defer cancel()
				defer c.timers.stop()
				c.watchSnoozes(run.Stopping(), events)
			})
		}
		if c.cfg.RepairInterval < 0 {
			return nil
		}
		run.Go(func() { c.repairLoop(run.Stopping()) })
		return nil
	})
}

func (c *Coordinator) repairLoop(ctx context.Context) {
	t := time.NewTicker(c.cfg.RepairInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if _, err := c.Repair(ctx); err != nil && ctx.Err() == nil {
			c.logger.WarnContext(ctx, "error repairing workflows", "error", err)
		}
	}
}

// Stop stops the repair sweep; tasks stop with River.
func (c *Coordinator) Stop(ctx context.Context) error {
	_, err := c.life.Stop(ctx)
	return err
}
