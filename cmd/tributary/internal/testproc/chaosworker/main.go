// Command chaosworker is one worker process of the fault-injection suite:
// the chaos workload (jobs, events, a cron schedule, a batch stream) on a
// runtime built from the environment with tributary's defaults, as
// `tributary worker` builds its own, until SIGTERM.
//
// Environment: DATABASE_URL, TRIBUTARY_SCHEMA and the other tributary
// settings (tributary.ConfigFromEnv); CHAOS_NAME names the process in the logs;
// CHAOS_SINK_DIR is the batch sink's directory; with AMQP_URL set the outbox
// forwarder also publishes to the chaos exchange.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/tributary-run/tributary"
	"github.com/tributary-run/tributary/amqpbridge"
	"github.com/tributary-run/tributary/cmd/tributary/internal/chaos"
	"github.com/tributary-run/tributary/jobs/batch"
	"github.com/tributary-run/tributary/jobs/events"
	"github.com/tributary-run/tributary/outbox"
	"github.com/tributary-run/tributary/queue"
	"github.com/tributary-run/tributary/scheduler"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "chaosworker:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx := context.Background()
	cfg, err := tributary.ConfigFromEnv()
	if err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})).With("process", chaos.ProcessName())
	pool, err := tributary.NewPool(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()

	rcfg := cfg.Runtime
	rcfg.Schema, rcfg.Logger, rcfg.Queues = cfg.Schema, logger, map[string]int{"default": 20}
	rt, err := queue.NewRuntime(pool, rcfg)
	if err != nil {
		return err
	}
	w := chaos.NewWorkers(pool, cfg.Schema, chaos.ProcessName())
	w.Register(rt)

	s := scheduler.New(rt.Client, scheduler.Config{Logger: logger})
	if err := s.Add(scheduler.Schedule{Name: chaos.ScheduleName, Spec: "@every 1s", Args: chaos.TickArgs{},
		CatchUp: scheduler.CatchUpEach, CatchUpMax: 1000}); err != nil {
		return err
	}
	if err := rt.AddService(s); err != nil {
		return err
	}

	sink, err := batch.OpenSink(ctx, "file://"+os.Getenv("CHAOS_SINK_DIR"))
	if err != nil {
		return err
	}
	streams := cfg.Batch.Streams
	if _, err := batch.Register(rt, batch.FlusherConfig{Streams: streams, Sink: sink, Logger: logger},
		batch.AgeTimerConfig{Streams: streams, Interval: cfg.Batch.TimerInterval, Logger: logger}); err != nil {
		return err
	}

	var fcfg events.ForwarderConfig
	if cfg.AMQP.Bridge.URL != "" {
		bcfg := cfg.AMQP.Bridge
		bcfg.Logger = logger
		bcfg.ConnectionName = "chaos-" + chaos.ProcessName()
		pub, err := amqpbridge.NewPublisher(bcfg)
		if err != nil {
			return err
		}
		if err := rt.AddService(pub); err != nil {
			return err
		}
		out, err := amqpbridge.NewOutbound(pub, amqpbridge.OutboundConfig{Exchange: chaos.Exchange})
		if err != nil {
			return err
		}
		fcfg.Publishers = []outbox.Publisher{out}
	}
	consumers, err := w.Consumers()
	if err != nil {
		return err
	}
	if _, err := events.Install(rt, events.InstallConfig{Consumers: consumers, Forwarder: fcfg}); err != nil {
		return err
	}
	return rt.Run(ctx)
}
