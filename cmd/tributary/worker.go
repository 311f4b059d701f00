package main

import (
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/tributary-run/tributary"
	"github.com/tributary-run/tributary/cmd/tributary/internal/demoevents"
	"github.com/tributary-run/tributary/cmd/tributary/internal/demojobs"
	"github.com/tributary-run/tributary/cmd/tributary/internal/demoworkflows"
	"github.com/tributary-run/tributary/dashboard"
	"github.com/tributary-run/tributary/jobs/events"
	"github.com/tributary-run/tributary/scheduler"
)

func newWorkerCmd(a *app) *cobra.Command {
	var queuesFlag, httpAddr string
	var migrate, demoMode bool
	cmd := &cobra.Command{
		Use:   "worker",
		Short: "Run a worker process: work jobs until SIGINT or SIGTERM",
		Long: `Run a worker process. It works jobs of the built-in and demo kinds on the
given queues until SIGINT or SIGTERM; then it stops fetching, lets running
jobs finish for TRIBUTARY_SHUTDOWN_TIMEOUT (default 30s), cancels the rest so
they run again later, and exits 0.

The worker heartbeats into the database. When another worker's heartbeat is
older than TRIBUTARY_LIVENESS_TIMEOUT (default 30s), its running jobs are
made available again. A worker that cannot heartbeat for most of that time
cancels its jobs and exits 1, before the others may take them.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			queues, err := parseQueues(queuesFlag)
			if err != nil {
				return err
			}
			if cmd.Flags().Changed("http") {
				if httpAddr == "" {
					return usagef("--http needs an address such as 127.0.0.1:8080")
				}
				// Checked here, not when the dashboard listens: by then River
				// and every service have started, and the worker would exit 1.
				if reason := dashboard.CheckAddr(httpAddr); reason != "" {
					return usagef("invalid --http %q: %s", httpAddr, reason)
				}
			}
			ctx := cmd.Context()
			pool, err := a.pool(ctx)
			if err != nil {
				return err
			}
			defer pool.Close()
			app, err := newWorkerApp(a, pool, queues, httpAddr)
			if err != nil {
				return err
			}
			if migrate {
				if _, err := app.Migrate(ctx); err != nil {
					return err
				}
			}
			if demoMode {
				if err := addDemoProducers(app); err != nil {
					return err
				}
			}
			a.logger.InfoContext(ctx, "worker starting", "database", a.cfg.DatabaseHost(), "schema", a.cfg.Schema, "pid", pidOf())
			return app.Run(ctx)
		},
	}
	cmd.Flags().StringVar(&queuesFlag, "queues", "default=100,events=50", "queues to work and their concurrency, as name=N,name=N (event consumers work \"events\")")
	cmd.Flags().StringVar(&httpAddr, "http", "", "serve the dashboard, /metrics and health checks on this address")
	cmd.Flags().BoolVar(&migrate, "migrate", false, "apply pending migrations before starting")
	cmd.Flags().BoolVar(&demoMode, "demo", false, "also enqueue a steady mix of demo jobs (and events), as `make run` does")
	return cmd
}

// parseQueues parses "default=100,events=50".
func parseQueues(s string) (map[string]int, error) {
	out := map[string]int{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, n, ok := strings.Cut(part, "=")
		count, err := strconv.Atoi(n)
		if !ok || name == "" || err != nil || count < 1 {
			return nil, usagef("invalid --queues entry %q: want name=N with N >= 1", part)
		}
		out[name] = count
	}
	if len(out) == 0 {
		return nil, usagef("--queues %q names no queue", s)
	}
	return out, nil
}

// newWorkerApp is the worker's App: what the environment configures, the
// queues and the dashboard address of the flags, and the demo's job kinds,
// workflows, event consumer and schedule, so `make run` and `tributary
// workflows start` have work to show. Tracing is already on (startTracing).
func newWorkerApp(a *app, pool *pgxpool.Pool, queues map[string]int, httpAddr string) (*tributary.App, error) {
	consumer, err := demoevents.NewConsumer()
	if err != nil {
		return nil, err
	}
	cfg := a.cfg
	cfg.Logger, cfg.Queues, cfg.Tracing = a.logger, queues, tributary.TracingConfig{}
	cfg.Dashboard.Addr = httpAddr // the flag, not TRIBUTARY_HTTP_ADDR: a worker serves only with --http
	cfg.Consumers = []*events.Consumer{consumer}
	cfg.Schedules = []scheduler.Schedule{demoSchedule()}
	app, err := tributary.New(pool, cfg)
	if err != nil {
		return nil, err
	}
	demojobs.Register(app.Runtime())
	demoworkflows.Register(app.Runtime())
	return app, nil
}

// addDemoProducers adds, for --demo, the services that enqueue a steady mix
// of demo jobs and emit demo events. Added last, they stop first.
func addDemoProducers(app *tributary.App) error {
	rt := app.Runtime()
	if err := rt.AddService(demojobs.NewProducer(rt.Client, 0)); err != nil {
		return err
	}
	p, err := demoevents.NewProducer(app.Pool(), app.Config().Schema, 0, app.Logger())
	if err != nil {
		return err
	}
	return rt.AddService(p)
}
