package main

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tributary-run/tributary/amqpbridge"
	"github.com/tributary-run/tributary/internal/envconfig"
	"github.com/tributary-run/tributary/jobs/batch"
	"github.com/tributary-run/tributary/jobs/events"
	"github.com/tributary-run/tributary/jobs/workflow"
	"github.com/tributary-run/tributary/migrations"
	"github.com/tributary-run/tributary/queue"
	"github.com/tributary-run/tributary/scheduler"
)

// Defaults of the example's own settings.
const (
	WarehouseQueueDefault   = "warehouse"
	AccessLogStreamDefault  = "access_logs"
	ShippedRetentionDefault = 90 * 24 * time.Hour
)

// Options are the example's own settings, besides tributary's (envconfig).
type Options struct {
	// WarehouseQueue is the AMQP queue the warehouse service publishes order
	// updates to (after QUEUE_PREFIX). Used only with AMQP_URL.
	//
	// Defaults to "warehouse".
	WarehouseQueue string

	// AccessLogStream is the batch stream the HTTP access log is staged in.
	//
	// Defaults to "access_logs".
	AccessLogStream string

	// ShippedRetention is how long shipped orders are kept.
	//
	// Defaults to 90 days.
	ShippedRetention time.Duration
}

// Service is the orders service: a worker runtime with every feature the
// service uses installed, and the HTTP API on top of it. The runtime is
// what starts and stops (Runtime.Run, or Start and Stop).
type Service struct {
	Runtime   *queue.Runtime
	Workflows *workflow.Client

	cfg     envconfig.Config
	opts    Options
	logger  *slog.Logger
	pool    *pgxpool.Pool
	st      store
	emitter *events.Emitter
	stager  *batch.Stager
}

// NewService migrates tributary's schema and the example's own tables, then
// builds the runtime with, in start order: the workers, the batch flushes,
// the scheduler with the clean-up schedules, the warehouse inbound bridge
// and the events (forwarder and consumers). The runtime stops them in
// reverse, so the inbound bridge stops before the flushes and the database
// work it feeds.
func NewService(ctx context.Context, pool *pgxpool.Pool, cfg envconfig.Config, opts Options, logger *slog.Logger) (*Service, error) {
	opts.WarehouseQueue = cmp.Or(opts.WarehouseQueue, WarehouseQueueDefault)
	opts.AccessLogStream = cmp.Or(opts.AccessLogStream, AccessLogStreamDefault)
	opts.ShippedRetention = cmp.Or(opts.ShippedRetention, ShippedRetentionDefault)
	s := &Service{cfg: cfg, opts: opts, logger: logger, pool: pool, st: store{schema: cfg.Schema}}

	m, err := migrations.New(pool, migrations.Config{Schema: cfg.Schema, Logger: logger})
	if err != nil {
		return nil, err
	}
	if _, err := m.Up(ctx); err != nil {
		return nil, err
	}
	if err := s.st.migrate(ctx, pool); err != nil {
		return nil, err
	}

	coord, err := workflow.NewCoordinator(pool, workflow.CoordinatorConfig{Schema: cfg.Schema, Logger: logger})
	if err != nil {
		return nil, err
	}
	rcfg := cfg.Runtime
	rcfg.Logger = logger
	if len(rcfg.Queues) == 0 {
		rcfg.Queues = map[string]int{"default": 20}
	}
	rcfg.Middleware = append(rcfg.Middleware, coord.Middleware())
	rt, err := queue.NewRuntime(pool, rcfg)
	if err != nil {
		return nil, err
	}
	s.Runtime, s.Workflows = rt, workflow.NewClient(rt.Client)
	if s.emitter, err = newEmitter(cfg.Schema); err != nil {
		return nil, err
	}

	queue.AddWorker(rt, &SendReceiptWorker{st: s.st, db: pool})
	queue.AddWorker(rt, &reserveWorker{})
	queue.AddWorker(rt, &chargeWorker{})
	queue.AddWorker(rt, &shipWorker{})
	queue.AddWorker(rt, &refundWorker{})
	if err := coord.Register(rt); err != nil {
		return nil, err
	}
	for _, install := range []func(ctx context.Context) error{s.installBatch, s.installScheduler, s.installWarehouse, s.installEvents} {
		if err := install(ctx); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// installBatch: the access log is staged per request and flushed to
// BATCH_SINK_URL (an S3 bucket in production) on the S3_BATCH_* thresholds.
func (s *Service) installBatch(ctx context.Context) error {
	sink, err := batch.OpenSink(ctx, s.cfg.BatchSinkURL)
	if err != nil {
		return fmt.Errorf("invalid BATCH_SINK_URL: %w", err)
	}
	if _, err := batch.Register(s.Runtime,
		batch.FlusherConfig{Streams: s.cfg.Batch, Sink: sink, Logger: s.logger},
		batch.AgeTimerConfig{Streams: s.cfg.Batch, Interval: s.cfg.BatchTimerInterval, Logger: s.logger}); err != nil {
		return err
	}
	s.stager, err = batch.NewStager(s.Runtime.Client, s.cfg.Batch)
	return err
}

// cleanupTargets are the tables this service cleans: tributary's for the
// features it uses, and its own shipped orders.
func (s *Service) cleanupTargets() []queue.CleanupTarget {
	return []queue.CleanupTarget{
		events.OutboxSentCleanup(), events.OutboxFailedCleanup(), events.IdleLaneCleanup(),
		batch.ObjectCleanup(), workflow.Cleanup(), shippedCleanup(s.opts.ShippedRetention),
	}
}

// installScheduler: one cron schedule per clean-up target
// (TRIBUTARY_CLEANUP_SPEC, hourly by default), fired once across replicas.
func (s *Service) installScheduler(ctx context.Context) error {
	ccfg := s.cfg.Cleanup
	ccfg.Targets = s.cleanupTargets()
	if _, err := scheduler.RegisterCleanup(s.Runtime, scheduler.CleanerConfig{Targets: ccfg.Targets, Logger: s.logger}); err != nil {
		return err
	}
	schedules, err := scheduler.CleanupSchedules(ccfg)
	if err != nil {
		return err
	}
	sch := scheduler.New(s.Runtime.Client, scheduler.Config{Logger: s.logger})
	if err := sch.Add(schedules...); err != nil {
		return err
	}
	return s.Runtime.AddService(sch)
}

// installWarehouse: with AMQP_URL, the warehouse's queue is read by the
// inbound bridge; each message is applied in a transaction and acked after
// it commits.
func (s *Service) installWarehouse(ctx context.Context) error {
	if s.cfg.AMQP.URL == "" {
		s.logger.InfoContext(ctx, "AMQP_URL is not set: not reading the warehouse queue")
		return nil
	}
	bcfg, err := s.cfg.Bridge(s.logger)
	if err != nil {
		return err
	}
	bcfg.ConnectionName = cmp.Or(bcfg.ConnectionName, "orders-warehouse")
	in, err := amqpbridge.NewInbound(bcfg, amqpbridge.InboundConfig{
		Queue:  s.opts.WarehouseQueue,
		DB:     s.pool,
		Insert: amqpbridge.PerDelivery(warehouseInsert(s.st, s.emitter)),
	})
	if err != nil {
		return err
	}
	return s.Runtime.AddService(in)
}

// installEvents: the forwarder moves outbox rows to the bus, the bus fans
// them out to billing and shipping.
func (s *Service) installEvents(ctx context.Context) error {
	consumers, err := newConsumers(s.st, s.pool)
	if err != nil {
		return err
	}
	_, err = events.Install(s.Runtime, events.InstallConfig{Consumers: consumers})
	return err
}
