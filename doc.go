// Package tributary runs durable jobs, transactional outbox events with
// ordered consumers, workflows, cron schedules, batch flushes and a
// RabbitMQ bridge on PostgreSQL and River, configured in one place.
//
// A process declares what it runs in a Config and builds an App with New;
// the App works jobs (Start, Stop, or Run until SIGINT or SIGTERM) and is
// also how the process enqueues, emits events, starts workflows and stages
// batch items, in its own transactions or in the caller's:
//
//	cfg, err := tributary.ConfigFromEnv() // DATABASE_URL, TRIBUTARY_SCHEMA, AMQP_URL, ...
//	pool, err := tributary.NewPool(ctx, cfg)
//	cfg.Consumers = []*events.Consumer{billing}
//	cfg.Events.Types = []events.Definition{OrderPlaced}
//	cfg.Schedules = []scheduler.Schedule{{Name: "nightly", Spec: "0 3 * * *", Args: ReportArgs{}}}
//	app, err := tributary.New(pool, cfg)
//	tributary.AddWorker(app, &SendReceiptWorker{})
//	_, err = app.Migrate(ctx)
//
//	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
//		// ... the application's own writes, then, committed with them:
//		_, err := app.EnqueueTx(ctx, tx, SendReceiptArgs{OrderID: "o-1"}, nil)
//		_, err = app.EmitTx(ctx, tx, OrderPlaced, order, events.Meta{AggregateID: "o-1"})
//		_, err = app.Workflows().InsertTx(ctx, tx, fulfilment)
//		return err
//	})
//	err = app.Run(ctx)
//
// A process that only enqueues or emits builds its App the same way and
// never calls Start or Run; New reads nothing from the database.
//
// examples/quickstart is the whole program (a job kind, an ordered event
// consumer, a two-task workflow and a cron schedule in 40 lines);
// examples/orders a service to start from. The feature packages (queue,
// jobs/events, jobs/workflow, scheduler, jobs/batch, jobs/inbox,
// amqpbridge, dashboard) stay usable on their own; New composes them in the
// order they must start.
package tributary
