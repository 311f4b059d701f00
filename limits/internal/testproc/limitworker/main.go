// Command limitworker is one worker process of the limits replica tests:
// it works internal/replica's jobs under its limit until SIGTERM.
// Configuration comes from DATABASE_URL, TRIBUTARY_SCHEMA, LIMIT_MAX (per
// key), LIMIT_RATE (starts a second) or LIMIT_TOTAL (over all keys,
// round-robin), LIMIT_QUEUE_RATE (starts a second of the jobs in
// replica.RatedQueue, declared besides the others), WORKERS (each queue's
// concurrency in this process) and LIVENESS_TIMEOUT.
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
	"github.com/tributary-run/tributary/limits"
	"github.com/tributary-run/tributary/limits/internal/replica"
	"github.com/tributary-run/tributary/queue"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "limitworker:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx := context.Background()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: logLevel()}))
	cfg, err := tributary.ConfigFromEnv()
	if err != nil {
		return err
	}
	schema := cfg.Schema
	pool, err := tributary.NewPool(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	var limit limits.Limit
	if rate := os.Getenv("LIMIT_RATE"); rate != "" {
		n, err := strconv.Atoi(rate)
		if err != nil {
			return fmt.Errorf("LIMIT_RATE: %w", err)
		}
		limit = replica.RateLimit(n)
	} else if total := os.Getenv("LIMIT_TOTAL"); total != "" {
		n, err := strconv.Atoi(total)
		if err != nil {
			return fmt.Errorf("LIMIT_TOTAL: %w", err)
		}
		limit = replica.FairLimit(n)
	} else {
		n, err := strconv.Atoi(os.Getenv("LIMIT_MAX"))
		if err != nil {
			return fmt.Errorf("LIMIT_MAX: %w", err)
		}
		limit = replica.Limit(n)
	}
	workers, err := strconv.Atoi(os.Getenv("WORKERS"))
	if err != nil {
		return fmt.Errorf("WORKERS: %w", err)
	}
	liveness, err := time.ParseDuration(os.Getenv("LIVENESS_TIMEOUT"))
	if err != nil {
		return fmt.Errorf("LIVENESS_TIMEOUT: %w", err)
	}
	declared, queues := []limits.Limit{limit}, map[string]int{"default": workers}
	if rate := os.Getenv("LIMIT_QUEUE_RATE"); rate != "" {
		n, err := strconv.Atoi(rate)
		if err != nil {
			return fmt.Errorf("LIMIT_QUEUE_RATE: %w", err)
		}
		// First: the other limits match any queue.
		declared = append([]limits.Limit{replica.QueueRateLimit(n)}, declared...)
		queues[replica.RatedQueue] = workers
	}
	lim, err := limits.New(limits.Config{Limits: declared, Schema: schema, Logger: logger})
	if err != nil {
		return err
	}
	rt, err := queue.NewRuntime(pool, queue.RuntimeConfig{
		Schema: schema, Logger: logger, Queues: queues,
		Middleware:    []rivertype.Middleware{lim.Middleware()},
		FetchCooldown: 5 * time.Millisecond, FetchPollInterval: time.Second,
		ShutdownTimeout: 10 * time.Second, LivenessTimeout: liveness,
	})
	if err != nil {
		return err
	}
	queue.AddWorker(rt, replica.Worker{})
	if _, err := lim.Register(rt); err != nil {
		return err
	}
	return rt.Run(ctx)
}

func logLevel() slog.Level {
	if os.Getenv("LIMITWORKER_DEBUG") != "" {
		return slog.LevelDebug
	}
	return slog.LevelWarn
}
