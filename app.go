package tributary

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/tributary-run/tributary/amqpbridge"
	"github.com/tributary-run/tributary/jobs/batch"
	"github.com/tributary-run/tributary/jobs/events"
	"github.com/tributary-run/tributary/jobs/workflow"
	"github.com/tributary-run/tributary/migrations"
	"github.com/tributary-run/tributary/queue"
	"github.com/tributary-run/tributary/scheduler"
)

// App is one tributary process: the River client and worker runtime with
// every feature Config declares installed. The same App enqueues, emits,
// starts workflows and stages batch items, from any goroutine; a process
// that only does that never calls Start.
type App struct {
	cfg       Config
	pool      *pgxpool.Pool
	rt        *queue.Runtime
	coord     *workflow.Coordinator
	workflows *workflow.Client
	emitter   *events.Emitter
	// dispatcher runs the consumers; On adds to it before Start.
	dispatcher *events.Dispatcher
	stager     *batch.Stager
	scheduler  *scheduler.Scheduler
	publisher  *amqpbridge.Publisher // nil with the AMQP bridge off

	// ownsPool: Open made the pool, and Stop (or the end of Run) closes
	// it.
	ownsPool bool

	// tracingMu guards stopTracing: Stop may run in several goroutines.
	tracingMu   sync.Mutex
	stopTracing func()
}

// New builds the App cfg declares on pool: it validates cfg (one
// *queue.ConfigError naming the field and the value), registers the
// workers and adds the services of every feature in the order they must
// start, and returns. It starts nothing and reads nothing from the
// database: Migrate, Start and Run do.
func New(pool *pgxpool.Pool, cfg Config) (*App, error) {
	if pool == nil {
		return nil, errors.New("tributary.New: nil pool (see NewPool, or Open)")
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, cfg.envNamed(err)
	}
	app := &App{cfg: cfg, pool: pool}
	if err := app.install(); err != nil {
		return nil, cfg.envNamed(err)
	}
	return app, nil
}

// Open builds the App of a process that owns its database connection: it
// connects to cfg.DatabaseURL (as NewPool), builds the App on that pool (as
// New) and applies pending migrations (as Migrate), so Run can start at
// once. The App closes the pool when Stop returns or Run ends; a process
// that never starts it calls Stop to close it. To share a pool, or to
// migrate separately (`tributary migrate up`, say, with other database
// rights), use NewPool, New and Migrate instead.
func Open(ctx context.Context, cfg Config) (*App, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	pool, err := NewPool(ctx, cfg)
	if err != nil {
		return nil, err
	}
	app, err := New(pool, cfg)
	if err != nil {
		pool.Close()
		return nil, err
	}
	app.ownsPool = true
	if _, err := app.Migrate(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	return app, nil
}

// AddWorker registers a worker for its job kind, as river.AddWorker does
// (and panics as it does, on a second worker for one kind). Add every
// worker before Start. A river.WorkFunc is a worker:
//
//	tributary.AddWorker(app, river.WorkFunc(func(ctx context.Context, job *river.Job[SendEmailArgs]) error { ... }))
func AddWorker[T river.JobArgs](app *App, w river.Worker[T]) {
	queue.AddWorker(app.rt, w)
}

// On subscribes fn to def in the App's consumer named consumer, as
// AddWorker registers a worker: the consumer of that name in
// Config.Consumers gets the handler, or, when there is none, On adds one
// with events.ConsumerConfig's defaults (ordered by aggregate, on the
// "events" queue). Emit accepts def from then on. Subscribe every handler
// before Start, from the goroutine that built the App:
//
//	tributary.On(app, "billing", OrderPlaced, func(ctx context.Context, m events.Message[Order]) error { ... })
//
// On panics, as AddWorker and events.On do, for an invalid consumer name,
// after Start, and when the new consumer's queue is not one of
// Config.Queues (put it there, or pass an events.Consumer configured as
// needed in Config.Consumers).
func On[T any](app *App, consumer string, def events.Event[T], fn events.HandlerFunc[T]) {
	if err := app.on(consumer, events.Handle(def, fn)); err != nil {
		panic(fmt.Errorf("tributary.On: %w", err))
	}
}

// AddSchedule declares cron schedules as Config.Schedules does, for a
// program that builds its App first (Main's setup). Add them before
// Start, from the goroutine that built the App. It panics, as On does, on
// an invalid schedule (the *scheduler.ScheduleError names it and the
// value), a name already declared, and after Start.
func (a *App) AddSchedule(schedules ...scheduler.Schedule) {
	if err := a.scheduler.Add(schedules...); err != nil {
		panic(fmt.Errorf("tributary: AddSchedule: %w", err))
	}
}

func (a *App) on(name string, sub events.Subscription) error {
	i := slices.IndexFunc(a.cfg.Consumers, func(c *events.Consumer) bool { return c.Name() == name })
	if i >= 0 {
		if err := a.cfg.Consumers[i].Subscribe(sub); err != nil {
			return err
		}
		return a.newEmitter()
	}
	c, err := events.NewConsumer(events.ConsumerConfig{Name: name})
	if err != nil {
		return err
	}
	if q := c.Config().Queue; a.cfg.Queues[q] == 0 {
		return &queue.ConfigError{Name: "Queues", Value: queuesString(a.cfg.Queues),
			Reason: fmt.Sprintf("consumer %s dispatches on queue %q, which this process does not work: add it", name, q)}
	}
	if err := c.Subscribe(sub); err != nil {
		return err
	}
	if err := a.dispatcher.AddConsumer(c); err != nil {
		return err
	}
	// Clipped: the caller's Config.Consumers array is never written.
	a.cfg.Consumers = append(slices.Clip(a.cfg.Consumers), c)
	return a.newEmitter()
}

// Migrate applies River's and tributary's pending migrations to the
// schema, creating it if needed. It is idempotent and safe from many
// processes at once (one migrates, the others wait and find nothing to do).
func (a *App) Migrate(ctx context.Context) (*migrations.Result, error) {
	m, err := migrations.New(a.pool, migrations.Config{Schema: a.cfg.Schema, Logger: a.cfg.Logger})
	if err != nil {
		return nil, err
	}
	return m.Up(ctx)
}

// Start checks that the schema is migrated, then starts River and every
// service in order (see New). Stop stops them.
func (a *App) Start(ctx context.Context) error {
	if err := checkMigrated(ctx, a.pool, a.cfg.Schema); err != nil {
		return err
	}
	if err := a.startTracing(ctx); err != nil {
		return err
	}
	if err := a.rt.Start(ctx); err != nil {
		if errors.Is(err, queue.ErrAlreadyStarted) {
			// The running start keeps its trace export.
			return fmt.Errorf("%s: %w", a.Name(), queue.ErrAlreadyStarted)
		}
		a.flushTracing()
		return err
	}
	return nil
}

// Name is "tributary app": an App is a queue.Service too, so a process
// that runs it beside services of its own may start and stop it as one.
func (a *App) Name() string { return "tributary app" }

// Stop stops the services in reverse order, River last: no new jobs are
// fetched, running jobs get Runtime.ShutdownTimeout to finish and the rest
// are cancelled to run again later. ctx bounds the whole stop.
func (a *App) Stop(ctx context.Context) error {
	defer a.closePool()
	defer a.flushTracing()
	return a.rt.Stop(ctx)
}

// Run starts the App, waits for ctx to end or for SIGINT or SIGTERM, and
// stops it as Stop does; a second signal cancels the running jobs at once.
// It returns nil after a clean stop, and an error wrapping
// queue.ErrLivenessLost when the process could no longer show it is alive
// (its jobs are then run by others).
func (a *App) Run(ctx context.Context) error {
	defer a.closePool()
	if err := checkMigrated(ctx, a.pool, a.cfg.Schema); err != nil {
		return err
	}
	if err := a.startTracing(ctx); err != nil {
		return err
	}
	defer a.flushTracing()
	return a.rt.Run(ctx)
}

// closePool closes the pool Open made; a pool given to New is the
// caller's.
func (a *App) closePool() {
	if a.ownsPool {
		a.pool.Close()
	}
}

// HardStop cancels the running jobs of a stop now instead of after the
// shutdown timeout.
func (a *App) HardStop() { a.rt.HardStop() }

// LivenessLost is closed once the process lost its liveness and stopped
// because of it; a process that uses Start and Stop should watch it and
// exit.
func (a *App) LivenessLost() <-chan struct{} { return a.rt.LivenessLost() }

// Config returns the App's configuration with its defaults filled.
func (a *App) Config() Config { return a.cfg }

// Pool returns the App's pool.
func (a *App) Pool() *pgxpool.Pool { return a.pool }

// Logger returns the App's logger.
func (a *App) Logger() *slog.Logger { return a.cfg.Logger }

// AMQPPublisher returns the App's RabbitMQ publisher, for code of the
// application's own that publishes to the broker (it connects on first
// use, and the App stops it). It is nil when the AMQP bridge is off
// (Config.AMQP.Bridge.URL empty).
func (a *App) AMQPPublisher() *amqpbridge.Publisher { return a.publisher }

// Runtime returns the worker runtime, for what the App does not wrap: adding
// a queue.Service, or its queue.Client's methods.
func (a *App) Runtime() *queue.Runtime { return a.rt }

// River returns the River client, the escape hatch to River's own API
// (JobList, JobCancel, Subscribe, ...).
func (a *App) River() *river.Client[pgx.Tx] { return a.rt.River() }

// Enqueue inserts a job in a transaction of its own. opts may be nil.
func (a *App) Enqueue(ctx context.Context, args river.JobArgs, opts *queue.EnqueueOpts) (*rivertype.JobInsertResult, error) {
	return a.rt.Enqueue(ctx, args, opts)
}

// EnqueueTx inserts a job in the caller's transaction: it exists only if tx
// commits.
func (a *App) EnqueueTx(ctx context.Context, tx pgx.Tx, args river.JobArgs, opts *queue.EnqueueOpts) (*rivertype.JobInsertResult, error) {
	return a.rt.EnqueueTx(ctx, tx, args, opts)
}

// EnqueueMany inserts jobs with River's batch insert in one transaction of
// its own and returns how many were inserted.
func (a *App) EnqueueMany(ctx context.Context, items []queue.EnqueueItem) (int, error) {
	return a.rt.EnqueueMany(ctx, items)
}

// EnqueueManyTx is EnqueueMany in the caller's transaction.
func (a *App) EnqueueManyTx(ctx context.Context, tx pgx.Tx, items []queue.EnqueueItem) (int, error) {
	return a.rt.EnqueueManyTx(ctx, tx, items)
}

// Emit writes one event into the outbox in a transaction of its own and
// returns its id. def must be an event type one of the App's consumers
// subscribes to (Config.Consumers, On) or one of Config.Events.Types (else
// the error is events.ErrUnknownEventType); meta.AggregateID
// orders the event among the others of its aggregate for every consumer.
func (a *App) Emit(ctx context.Context, def events.Definition, payload any, meta events.Meta) (string, error) {
	return a.emitter.Emit(ctx, a.pool, def, payload, meta)
}

// EmitTx writes one event in the caller's transaction: it exists, and is
// forwarded, only if tx commits.
func (a *App) EmitTx(ctx context.Context, tx pgx.Tx, def events.Definition, payload any, meta events.Meta) (string, error) {
	return a.emitter.EmitTx(ctx, tx, def, payload, meta)
}

// EmitMany writes several events in one transaction of its own, in one
// statement, and returns their ids in order. Every item is checked before
// anything is written: one bad item writes none.
func (a *App) EmitMany(ctx context.Context, items []events.Emission) ([]string, error) {
	return a.emitter.EmitMany(ctx, a.pool, items)
}

// EmitManyTx is EmitMany in the caller's transaction.
func (a *App) EmitManyTx(ctx context.Context, tx pgx.Tx, items []events.Emission) ([]string, error) {
	return a.emitter.EmitManyTx(ctx, tx, items)
}

// Workflows returns the workflow client: Insert and InsertTx start a
// workflow built with workflow.New; Get, List, Signal, Cancel and Retry
// operate them.
func (a *App) Workflows() *workflow.Client { return a.workflows }

// StartWorkflow builds the workflow Config.Workflows registered as name
// from its JSON input and inserts it in a transaction of its own. opts may
// be nil.
func (a *App) StartWorkflow(ctx context.Context, name string, input json.RawMessage, opts *workflow.Opts) (*workflow.InsertResult, error) {
	if a.cfg.Workflows == nil {
		return nil, fmt.Errorf("no workflow %q: Config.Workflows is empty", name)
	}
	return a.workflows.Start(ctx, a.cfg.Workflows, name, input, opts)
}

// StartWorkflowTx is StartWorkflow in the caller's transaction.
func (a *App) StartWorkflowTx(ctx context.Context, tx pgx.Tx, name string, input json.RawMessage, opts *workflow.Opts) (*workflow.InsertResult, error) {
	if a.cfg.Workflows == nil {
		return nil, fmt.Errorf("no workflow %q: Config.Workflows is empty", name)
	}
	return a.workflows.StartTx(ctx, tx, a.cfg.Workflows, name, input, opts)
}

// Stage adds items to a batch stream in a transaction of its own; a
// process with a sink (Config.Batch) writes them out.
func (a *App) Stage(ctx context.Context, stream string, payloads ...[]byte) error {
	return a.stager.Stage(ctx, stream, payloads...)
}

// StageTx adds one item to a batch stream in the caller's transaction.
func (a *App) StageTx(ctx context.Context, tx pgx.Tx, stream string, payload []byte) error {
	return a.stager.StageTx(ctx, tx, stream, payload)
}

// checkMigrated refuses to work on a schema that lacks migrations, with the
// ways to fix it.
func checkMigrated(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	m, err := migrations.New(pool, migrations.Config{Schema: schema})
	if err != nil {
		return err
	}
	current, err := m.Current(ctx)
	if err != nil {
		return err
	}
	if !current {
		return fmt.Errorf("schema %q has pending migrations; run `tributary migrate up` (or App.Migrate) first", schema)
	}
	return nil
}
