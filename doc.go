// Package tributary runs durable jobs, transactional outbox events with
// ordered consumers, workflows, cron schedules, batch flushes and a
// RabbitMQ bridge on PostgreSQL and River, configured in one place.
//
// The quick start (examples/quickstart, README.md's first program) works a
// job kind, an ordered event consumer, a two-task workflow and a cron
// schedule; run it with DATABASE_URL set:
//
//	package main
//
//	import (
//		"context"
//		"log"
//
//		"github.com/riverqueue/river"
//		"github.com/tributary-run/tributary"
//		"github.com/tributary-run/tributary/jobs/events"
//		"github.com/tributary-run/tributary/jobs/workflow"
//		"github.com/tributary-run/tributary/scheduler"
//	)
//
//	type Hello struct{ Name string } // a job's arguments and an event's payload
//
//	func (Hello) Kind() string { return "hello" }
//
//	var placed = events.Define[Hello]("order.placed", nil)
//
//	func main() { tributary.Main(setup) } // configured by DATABASE_URL, ...; works until SIGTERM
//
//	func setup(ctx context.Context, app *tributary.App) error {
//		tributary.AddWorker(app, river.WorkFunc(func(ctx context.Context, job *river.Job[Hello]) error {
//			log.Println("hello", job.Args.Name)
//			return nil
//		}))
//		tributary.On(app, "billing", placed, func(ctx context.Context, m events.Message[Hello]) error {
//			log.Println("billing", m.Payload.Name) // in emit order per aggregate
//			return nil
//		})
//		app.AddSchedule(scheduler.Schedule{Name: "hello", Spec: "@every 5s", Args: Hello{"cron"}})
//		wf := workflow.New("greetings", nil)
//		wf.Add("first", Hello{"first"}, nil)
//		wf.Add("second", Hello{"second"}, &workflow.TaskOpts{Deps: []string{"first"}})
//		if _, err := app.Workflows().Insert(ctx, wf); err != nil {
//			return err
//		}
//		_, err := app.Emit(ctx, placed, Hello{"o-1"}, events.Meta{AggregateID: "o-1"})
//		return err
//	}
//
// Main is the short way: the Config from the environment (ConfigFromEnv,
// the variables of docs/configuration.md), Open, the program's setup, Run.
// A process that sets Config fields in code builds its App with Open, or
// with New on a pool of its own. The App works jobs (Start and Stop, or Run until
// SIGINT or SIGTERM) and is also how the process enqueues, emits events,
// starts workflows and stages batch items, in its own transactions or in
// the caller's:
//
//	err = pgx.BeginFunc(ctx, app.Pool(), func(tx pgx.Tx) error {
//		// ... the application's own writes, then, committed with them:
//		if _, err := app.EnqueueTx(ctx, tx, SendReceiptArgs{OrderID: "o-1"}, nil); err != nil {
//			return err
//		}
//		_, err := app.EmitTx(ctx, tx, OrderPlaced, order, events.Meta{AggregateID: "o-1"})
//		return err
//	})
//
// A process that only enqueues or emits builds its App the same way and
// never calls Start or Run; New reads nothing from the database.
//
// examples/orders is a service to start from. The feature packages (queue,
// jobs/events, jobs/workflow, scheduler, jobs/batch, jobs/inbox,
// amqpbridge, dashboard) stay usable on their own; New composes them in the
// order they must start.
package tributary
