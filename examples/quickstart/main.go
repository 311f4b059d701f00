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
	cfg, err := tributary.ConfigFromEnv() // DATABASE_URL, TRIBUTARY_SCHEMA, ...
	check(err)

	placed := events.Define[Hello]("order.placed", nil)
	billing, err := events.NewConsumer(events.ConsumerConfig{Name: "billing"})
	check(err)
	events.On(billing, placed, func(ctx context.Context, m events.Message[Hello]) error {
		log.Println("billing", m.Payload.Name) // in emit order per aggregate
		return nil
	})
	cfg.Consumers = []*events.Consumer{billing}
	cfg.Schedules = []scheduler.Schedule{{Name: "hello", Spec: "@every 5s", Args: Hello{"cron"}}}

	app, err := tributary.Open(ctx, cfg) // connects and migrates
	check(err)
	tributary.AddWorker(app, river.WorkFunc(func(ctx context.Context, job *river.Job[Hello]) error {
		log.Println("hello", job.Args.Name)
		return nil
	}))

	wf := workflow.New("greetings", nil)
	wf.Add("first", Hello{"first"}, nil)
	wf.Add("second", Hello{"second"}, &workflow.TaskOpts{Deps: []string{"first"}})
	_, err = app.Workflows().Insert(ctx, wf)
	check(err)
	_, err = app.Emit(ctx, placed, Hello{"o-1"}, events.Meta{AggregateID: "o-1"})
	check(err)
	check(app.Run(ctx)) // until SIGINT or SIGTERM
}

func check(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
