// Command replicaworker is one process of the workflow replica tests: a worker
// with the workflow coordinator and the diamond task worker, until SIGTERM.
// Configuration: DATABASE_URL, TRIBUTARY_SCHEMA, REPLICA_NAME,
// REPLICA_FAIL_RATE, REPLICA_MAX_LATENCY.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"time"

	"github.com/riverqueue/river/rivertype"

	"github.com/tributary-run/tributary"
	"github.com/tributary-run/tributary/jobs/workflow"
	"github.com/tributary-run/tributary/jobs/workflow/internal/wfreplica"
	"github.com/tributary-run/tributary/queue"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "replicaworker:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx := context.Background()
	env, err := tributary.ConfigFromEnv()
	if err != nil {
		return err
	}
	cfg := queue.Config{DatabaseURL: env.DatabaseURL, Schema: env.Schema}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	pool, err := queue.NewPool(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	failRate, _ := strconv.ParseFloat(os.Getenv("REPLICA_FAIL_RATE"), 64)
	maxLatency, _ := time.ParseDuration(os.Getenv("REPLICA_MAX_LATENCY"))
	coord, err := workflow.NewCoordinator(pool, workflow.CoordinatorConfig{Schema: cfg.Schema, Logger: logger, RepairInterval: time.Second})
	if err != nil {
		return err
	}
	rt, err := queue.NewRuntime(pool, queue.RuntimeConfig{
		Schema: cfg.Schema, Logger: logger, Queues: map[string]int{"default": 20},
		FetchCooldown: 5 * time.Millisecond, FetchPollInterval: 200 * time.Millisecond, ShutdownTimeout: 10 * time.Second,
		// A killed process's tasks are rescued by process liveness; a
		// short timeout keeps the test's recovery within seconds.
		LivenessTimeout: 5 * time.Second,
		Middleware:      []rivertype.Middleware{coord.Middleware()},
	})
	if err != nil {
		return err
	}
	queue.AddWorker(rt, wfreplica.NewWorker(pool, wfreplica.Config{
		Schema: cfg.Schema, Replica: os.Getenv("REPLICA_NAME"), FailRate: failRate, MaxLatency: maxLatency,
	}))
	if err := coord.Register(rt); err != nil {
		return err
	}
	return rt.Run(ctx)
}
