package main

import (
	"context"
	"fmt"
	"github.com/riverqueue/river"
	"github.com/tributary-run/tributary"
	"github.com/tributary-run/tributary/jobs/events"
	"github.com/tributary-run/tributary/jobs/workflow"
	"github.com/tributary-run/tributary/scheduler"
)

type Hello struct{ Name string } // a job's args and an event's payload

func (Hello) Kind() string { return "hello" }

func main() {
	ctx, cfg := context.Background(), must(tributary.ConfigFromEnv()) // DATABASE_URL, TRIBUTARY_SCHEMA, ...
	placed := events.Define[Hello]("order.placed", nil)
	billing := must(events.NewConsumer(events.ConsumerConfig{Name: "billing", Queue: tributary.EventsQueue}))
	events.On(billing, placed, func(ctx context.Context, m events.Message[Hello]) error { fmt.Println("billing", m.ID); return nil })
	cfg.Consumers, cfg.Events.Types = []*events.Consumer{billing}, []events.Definition{placed}
	cfg.Schedules = []scheduler.Schedule{{Name: "hello.cron", Spec: "@every 5s", Args: Hello{"cron"}}}
	app := must(tributary.New(must(tributary.NewPool(ctx, cfg)), cfg))
	tributary.AddWorker(app, river.WorkFunc(func(ctx context.Context, j *river.Job[Hello]) error { fmt.Println("hello", j.Args.Name); return nil }))
	must(app.Migrate(ctx))
	wf := workflow.New("greetings", nil)
	wf.Add("first", Hello{"first"}, nil)
	wf.Add("second", Hello{"second"}, &workflow.TaskOpts{Deps: []string{"first"}})
	must(app.Workflows().Insert(ctx, wf))
	must(app.Emit(ctx, placed, Hello{"o-1"}, events.Meta{AggregateID: "o-1"})) // an aggregate's events: in emit order
	must(app, app.Run(ctx))                                                    // until SIGINT or SIGTERM
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
