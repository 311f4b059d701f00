// Command replicaworker is one replica of the events replica test: a worker
// process with the replica consumers and a forwarder, until SIGTERM.
// Configuration comes from DATABASE_URL, TRIBUTARY_SCHEMA, REPLICA_NAME,
// REPLICA_FAIL_RATE and REPLICA_MAX_LATENCY.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"time"

	"github.com/tributary-run/tributary/jobs/events"
	"github.com/tributary-run/tributary/jobs/events/internal/replica"
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
	cfg, err := queue.ConfigFromEnv()
	if err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	pool, err := queue.NewPool(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	failRate, _ := strconv.ParseFloat(os.Getenv("REPLICA_FAIL_RATE"), 64)
	maxLatency, _ := time.ParseDuration(os.Getenv("REPLICA_MAX_LATENCY"))
	name := os.Getenv("REPLICA_NAME")
	consumers, err := replica.Consumers(pool, replica.Config{
		Schema: cfg.Schema, Replica: name, FailRate: failRate, MaxLatency: maxLatency, RetryDelay: 20 * time.Millisecond,
	})
	if err != nil {
		return err
	}
	rt, err := queue.NewRuntime(pool, queue.RuntimeConfig{
		Schema: cfg.Schema, Logger: logger, Queues: map[string]int{"default": 20},
		FetchCooldown: 5 * time.Millisecond, FetchPollInterval: 200 * time.Millisecond, ShutdownTimeout: 10 * time.Second,
	})
	if err != nil {
		return err
	}
	if _, err := events.Install(rt, events.InstallConfig{
		Consumers: consumers,
		Forwarder: events.ForwarderConfig{ID: name, SweepInterval: 200 * time.Millisecond, BatchSize: 200},
	}); err != nil {
		return err
	}
	fmt.Fprintln(os.Stdout, "ready")
	return rt.Run(ctx)
}
