package main

import (
	"cmp"
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tributary-run/tributary"
	"github.com/tributary-run/tributary/amqpbridge"
	"github.com/tributary-run/tributary/queue"
)

// Defaults of the example's own settings.
const (
	WarehouseQueueDefault   = "warehouse"
	AccessLogStreamDefault  = "access_logs"
	ShippedRetentionDefault = 90 * 24 * time.Hour
)

// Options are the example's own settings, besides tributary's.
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

// Service is the orders service: a tributary App with what the service
// declares (workers, consumers, the warehouse's inbound bridge, a clean-up
// target of its own) and the HTTP API on top of it. The App is what starts
// and stops (App.Run, or Start and Stop).
type Service struct {
	App  *tributary.App
	opts Options
	st   store
}

// NewService declares the service on cfg (tributary's settings, from the
// environment in main), builds the App and migrates tributary's schema and
// the example's own tables.
func NewService(ctx context.Context, pool *pgxpool.Pool, cfg tributary.Config, opts Options) (*Service, error) {
	opts.WarehouseQueue = cmp.Or(opts.WarehouseQueue, WarehouseQueueDefault)
	opts.AccessLogStream = cmp.Or(opts.AccessLogStream, AccessLogStreamDefault)
	opts.ShippedRetention = cmp.Or(opts.ShippedRetention, ShippedRetentionDefault)
	s := &Service{opts: opts, st: store{schema: cmp.Or(cfg.Schema, queue.SchemaDefault)}}

	consumers, err := newConsumers(s.st, pool)
	if err != nil {
		return nil, err
	}
	cfg.Consumers = consumers // App.Emit takes the event types they handle
	cfg.Events.SourceService = sourceService
	cfg.Cleanup.Targets = append(cfg.Cleanup.Targets, shippedCleanup(opts.ShippedRetention))
	// With AMQP_URL, the warehouse's queue is read by the inbound bridge;
	// each message is applied in a transaction and acked after it commits.
	if cfg.AMQP.Bridge.URL != "" {
		cfg.AMQP.Bridge.ConnectionName = cmp.Or(cfg.AMQP.Bridge.ConnectionName, "orders-warehouse")
		cfg.AMQP.Inbound = append(cfg.AMQP.Inbound, amqpbridge.InboundConfig{
			Queue: opts.WarehouseQueue, Insert: amqpbridge.PerDelivery(s.warehouseInsert),
		})
	}
	if s.App, err = tributary.New(pool, cfg); err != nil {
		return nil, err
	}
	tributary.AddWorker(s.App, &SendReceiptWorker{st: s.st, db: pool})
	tributary.AddWorker(s.App, &reserveWorker{})
	tributary.AddWorker(s.App, &chargeWorker{})
	tributary.AddWorker(s.App, &shipWorker{})
	tributary.AddWorker(s.App, &refundWorker{})

	if _, err := s.App.Migrate(ctx); err != nil {
		return nil, err
	}
	return s, s.st.migrate(ctx, pool)
}
