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

var placed = events.Define[Hello]("order.placed", nil)

func main() { tributary.Main(setup) } // configured by DATABASE_URL, ...; works until SIGTERM

func setup(ctx context.Context, app *tributary.App) error {
	tributary.AddWorker(app, river.WorkFunc(func(ctx context.Context, job *river.Job[Hello]) error {
		log.Println("hello", job.Args.Name)
		return nil
	}))
	tributary.On(app, "billing", placed, func(ctx context.Context, m events.Message[Hello]) error {
		log.Println("billing", m.Payload.Name) // in emit order per aggregate
		return nil
	})
	app.AddSchedule(scheduler.Schedule{Name: "hello", Spec: "@every 5s", Args: Hello{"cron"}})
	wf := workflow.New("greetings", nil)
	wf.Add("first", Hello{"first"}, nil)
	wf.Add("second", Hello{"second"}, &workflow.TaskOpts{Deps: []string{"first"}})
	if _, err := app.Workflows().Insert(ctx, wf); err != nil {
		return err
	}
	_, err := app.Emit(ctx, placed, Hello{"o-1"}, events.Meta{AggregateID: "o-1"})
	return err
}
