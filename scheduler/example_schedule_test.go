package scheduler_test

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tributary-run/tributary/queue"
	"github.com/tributary-run/tributary/scheduler"
)

type ReportArgs struct {
	Period string `json:"period"`
}

func (ReportArgs) Kind() string { return "report.build" }

// Registration checks every schedule before anything is stored; a bad spec,
// an unknown timezone or a duplicate name is an error naming the schedule
// and the value.
func ExampleScheduler_Add() {
	// The pool connects lazily: Add itself needs no database.
	pool, err := pgxpool.New(context.Background(), "postgres://127.0.0.1:5432/app")
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	client, err := queue.NewClient(pool, queue.ClientConfig{})
	if err != nil {
		panic(err)
	}
	s := scheduler.New(client, scheduler.Config{})

	fmt.Println(s.Add(scheduler.Schedule{
		Name:     "nightly-report",
		Spec:     "30 2 * * *",
		Timezone: "Europe/Berln",
		Args:     ReportArgs{Period: "day"},
	}))
	fmt.Println(s.Add(scheduler.Schedule{Name: "hourly-report", Spec: "0 * * *", Args: ReportArgs{Period: "hour"}}))
	fmt.Println(s.Add(scheduler.Schedule{
		Name:    "nightly-report",
		Spec:    "CRON_TZ=Europe/Berlin 30 2 * * *",
		Args:    ReportArgs{Period: "day"},
		CatchUp: scheduler.CatchUpOnce,
		Overlap: scheduler.OverlapSkip,
	}))
	fmt.Println(s.Add(scheduler.Schedule{Name: "nightly-report", Spec: "@daily", Args: ReportArgs{}}))
	// Output:
	// schedule "nightly-report": invalid timezone "Europe/Berln": unknown timezone
	// schedule "hourly-report": invalid spec "0 * * *": expected 5 to 6 fields, found 4: [0 * * *]
	// <nil>
	// schedule "nightly-report": invalid name "nightly-report": a schedule with this name is already registered
}
