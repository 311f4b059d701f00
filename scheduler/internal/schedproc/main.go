// Command schedproc is a minimal worker process for the scheduler's
// failover test: a runtime with one @every 1s schedule (catch-up each, so a
// late replica inserts every fire time) and a no-op worker for its kind. It
// prints "ready" once started and stops on SIGINT/SIGTERM; the test kills
// it with SIGKILL to simulate a crash.
//
// With SCHEDPROC_HANG=1 it blocks inside its first fire's transaction,
// after inserting the job and before committing, and prints
// "hanging FIRE_TIME" so the test can kill it there.
//
// Environment: DATABASE_URL, TRIBUTARY_SCHEMA, SCHEDPROC_ID, SCHEDPROC_HANG.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/tributary-run/tributary/queue"
	"github.com/tributary-run/tributary/scheduler"
)

type tickArgs struct{}

func (tickArgs) Kind() string { return "schedtest.noop" }

type tickWorker struct{ river.WorkerDefaults[tickArgs] }

func (tickWorker) Work(context.Context, *river.Job[tickArgs]) error { return nil }

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "schedproc:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))

	cfg, err := pgxpool.ParseConfig(os.Getenv("DATABASE_URL"))
	if err != nil {
		return err
	}
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()

	rt, err := queue.NewRuntime(pool, queue.RuntimeConfig{
		Schema:          os.Getenv("TRIBUTARY_SCHEMA"),
		Logger:          logger,
		Queues:          map[string]int{"default": 2},
		ShutdownTimeout: 2 * time.Second,
	})
	if err != nil {
		return err
	}
	queue.AddWorker(rt, &tickWorker{})
	scfg := scheduler.Config{ID: os.Getenv("SCHEDPROC_ID")}
	if os.Getenv("SCHEDPROC_HANG") == "1" {
		scfg.Test.BeforeCommitFunc = func(ctx context.Context, _ string, fireTimes []time.Time) {
			if len(fireTimes) == 0 {
				return
			}
			fmt.Println("hanging", fireTimes[len(fireTimes)-1].UTC().Format(time.RFC3339Nano))
			<-ctx.Done() // until killed (or stopped)
		}
	}
	s := scheduler.New(rt.Client, scfg)
	if err := s.Add(scheduler.Schedule{Name: "tick", Spec: "@every 1s", Args: tickArgs{}, CatchUp: scheduler.CatchUpEach, CatchUpMax: 100}); err != nil {
		return err
	}
	if err := rt.AddService(s); err != nil {
		return err
	}
	if err := rt.Start(ctx); err != nil {
		return err
	}
	fmt.Println("ready")
	<-ctx.Done()
	stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return rt.Stop(stopCtx)
}
