// Command replicaworker is one replica of the events replica test: a worker
// process with the replica consumers and a forwarder, until SIGTERM.
// Configuration comes from DATABASE_URL, TRIBUTARY_SCHEMA, REPLICA_NAME,
// REPLICA_FAIL_RATE and REPLICA_MAX_LATENCY; REPLICA_BROKER adds a plain
// publisher, REPLICA_DIE_AFTER_CLAIM kills the process with SIGKILL right
// after its first claim, REPLICA_STALE_AFTER sets the stale-claim cut-off,
// REPLICA_WORK_QUEUE names the one queue the process works (default:
// "default", the consumers' queue; another leaves their dispatch jobs to
// the other replicas).
package main

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/tributary-run/tributary"
	"github.com/tributary-run/tributary/jobs/events"
	"github.com/tributary-run/tributary/jobs/events/internal/replica"
	"github.com/tributary-run/tributary/outbox"
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
	cfg, err := tributary.ConfigFromEnv()
	if err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	pool, err := tributary.NewPool(ctx, cfg)
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
		Schema: cfg.Schema, Logger: logger, Queues: map[string]int{cmp.Or(os.Getenv("REPLICA_WORK_QUEUE"), "default"): 20},
		FetchCooldown: 5 * time.Millisecond, FetchPollInterval: 200 * time.Millisecond, ShutdownTimeout: 10 * time.Second,
	})
	if err != nil {
		return err
	}
	fcfg := events.ForwarderConfig{ID: name, SweepInterval: 200 * time.Millisecond, ClaimSize: 200}
	if d, err := time.ParseDuration(os.Getenv("REPLICA_STALE_AFTER")); err == nil {
		fcfg.StaleClaimAfter = d
	}
	if os.Getenv("REPLICA_BROKER") != "" {
		// A plain (non-transactional) publisher beside the bus, as the AMQP
		// bridge is: forwarding then claims rows (CLAIMED) before publishing.
		fcfg.Publishers = []outbox.Publisher{acceptAll{}}
	}
	if os.Getenv("REPLICA_DIE_AFTER_CLAIM") != "" {
		fcfg.AfterClaimFunc = func(ctx context.Context, evs []outbox.Event) error {
			fmt.Fprintf(os.Stderr, "claimed %d rows, dying\n", len(evs))
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		}
	}
	if _, err := events.Install(rt, events.InstallConfig{Consumers: consumers, Forwarder: fcfg, SkipQueueCheck: os.Getenv("REPLICA_WORK_QUEUE") != ""}); err != nil {
		return err
	}
	return rt.Run(ctx)
}

// acceptAll is a plain publisher that accepts every batch.
type acceptAll struct{}

func (acceptAll) Name() string { return "accept-all" }

func (acceptAll) PublishOutbox(ctx context.Context, evs []outbox.Event) error { return nil }
