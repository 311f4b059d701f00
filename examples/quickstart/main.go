package main

import (
	"context"
	"log"

	"github.com/riverqueue/river"
	"github.com/tributary-run/tributary"
	"github.com/tributary-run/tributary/jobs/events"
	"github.com/tributary-run/tributary/jobs/workflow"
	"github.com/tributary-run/tributary/scheduler"
)

type Hello struct{ Name string } // a job's arguments and an event's payload

func (Hello) Kind() string { return "hello" }

func main() {
	ctx := context.Background()
	cfg := must(tributary.ConfigFromEnv()) // DATABASE_URL, TRIBUTARY_SCHEMA, ...
	cfg.Schedules = []scheduler.Schedule{{Name: "hello", Spec: "@every 5s", Args: Hello{"cron"}}}
	app := must(tributary.Open(ctx, cfg)) // connects and migrates

	tributary.AddWorker(app, river.WorkFunc(func(ctx context.Context, job *river.Job[Hello]) error {
		log.Println("hello", job.Args.Name)
		return nil
	}))
	placed := events.Define[Hello]("order.placed", nil)
	tributary.On(app, "billing", placed, func(ctx context.Context, m events.Message[Hello]) error {
		log.Println("billing", m.Payload.Name) // in emit order per aggregate
		return nil
	})

	wf := workflow.New("greetings", nil)
	wf.Add("first", Hello{"first"}, nil)
	wf.Add("second", Hello{"second"}, &workflow.TaskOpts{Deps: []string{"first"}})
	must(app.Workflows().Insert(ctx, wf))
	must(app.Emit(ctx, placed, Hello{"o-1"}, events.Meta{AggregateID: "o-1"}))
	if err := app.Run(ctx); err != nil { // until SIGINT or SIGTERM
		log.Fatal(err)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		log.Fatal(err)
	}
	return v
}
