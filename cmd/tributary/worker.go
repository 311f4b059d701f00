package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/tributary-run/tributary/cmd/tributary/internal/demojobs"
	"github.com/tributary-run/tributary/cmd/tributary/internal/demoworkflows"
	"github.com/tributary-run/tributary/dashboard"
	"github.com/tributary-run/tributary/jobs/batch"
	"github.com/tributary-run/tributary/jobs/inbox"
	"github.com/tributary-run/tributary/jobs/workflow"
	"github.com/tributary-run/tributary/migrations"
	"github.com/tributary-run/tributary/outbox"
	"github.com/tributary-run/tributary/queue"
)

// workerEnv is what an installer gets to wire its feature into the worker
// process.
type workerEnv struct {
	app      *app
	pool     *pgxpool.Pool
	runtime  *queue.Runtime
	httpAddr string // empty: no HTTP server
	demo     bool   // run the demo producers

	// collectors are Prometheus collectors installers add for the
	// dashboard's /metrics (served with --http); the dashboard installer
	// runs last and registers them.
	collectors []prometheus.Collector

	// outboxPublishers are extra destinations for the outbox forwarder
	// besides the in-database bus (the AMQP outbound bridge).
	outboxPublishers []outbox.Publisher

	// batchStager stages items for the batch flushes installBatch
	// registers; one per process, shared by every installer that stages.
	batchStager *batch.Stager

	// coordinator advances workflows; its middleware is in the runtime's
	// config, so it is built before the runtime.
	coordinator *workflow.Coordinator
}

// installer registers workers and adds services to the worker's runtime.
type installer struct {
	name    string
	install func(ctx context.Context, env *workerEnv) error
}

// workerInstallers lists, in start order, what the worker process runs
// besides River. Each feature adds its installer here.
func workerInstallers() []installer {
	return []installer{
		{name: "demo jobs", install: func(ctx context.Context, env *workerEnv) error {
			demojobs.Register(env.runtime)
			if env.demo {
				return env.runtime.AddService(demojobs.NewProducer(env.runtime.Client, 0))
			}
			return nil
		}},
		{name: "workflows", install: installWorkflows},
		{name: "scheduler", install: installScheduler},
		{name: "batch flushes", install: installBatch},
		// The inbox workers with no inbox: a job of an inbox on a queue this
		// worker works waits (snoozed) for the inbox's own process instead of
		// failing here as a job of an unknown kind.
		{name: "inbox", install: func(ctx context.Context, env *workerEnv) error { return inbox.Install(env.runtime) }},
		{name: "AMQP bridge", install: installAMQP},
		{name: "events", install: installEvents},
		{name: "dashboard", install: installDashboard}, // last: it registers env.collectors
	}
}

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
			if migrate {
				m, err := migrations.New(pool, migrations.Config{Schema: a.cfg.Schema, Logger: a.logger})
				if err != nil {
					return err
				}
				if _, err := m.Up(ctx); err != nil {
					return err
				}
			}
			if err := checkMigrated(ctx, pool, a.cfg.Schema); err != nil {
				return err
			}
			// The coordinator's middleware wraps every job (it records workflow
			// task outcomes), so it exists before the runtime does.
			coord, err := workflow.NewCoordinator(pool, workflow.CoordinatorConfig{Schema: a.cfg.Schema, Logger: a.logger})
			if err != nil {
				return err
			}
			rcfg := a.cfg.Runtime
			rcfg.Logger, rcfg.Queues = a.logger, queues
			rcfg.Middleware = append(rcfg.Middleware, coord.Middleware())
			rt, err := queue.NewRuntime(pool, rcfg)
			if err != nil {
				return usagef("%v", err)
			}
			env := &workerEnv{app: a, pool: pool, runtime: rt, httpAddr: httpAddr, demo: demoMode, coordinator: coord}
			for _, inst := range workerInstallers() {
				if err := inst.install(ctx, env); err != nil {
					return fmt.Errorf("error setting up %s: %w", inst.name, err)
				}
			}
			a.logger.InfoContext(ctx, "worker starting", "database", a.cfg.DatabaseHost(), "schema", a.cfg.Schema, "pid", pidOf())
			return rt.Run(ctx)
		},
	}
	cmd.Flags().StringVar(&queuesFlag, "queues", "default=100", "queues to work and their concurrency, as name=N,name=N")
	cmd.Flags().StringVar(&httpAddr, "http", "", "serve the dashboard, /metrics and health checks on this address")
	cmd.Flags().BoolVar(&migrate, "migrate", false, "apply pending migrations before starting")
	cmd.Flags().BoolVar(&demoMode, "demo", false, "also enqueue a steady mix of demo jobs (and events), as `make run` does")
	return cmd
}

// checkMigrated refuses to start a worker on a schema that lacks migrations,
// with the command that fixes it.
func checkMigrated(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	m, err := migrations.New(pool, migrations.Config{Schema: schema})
	if err != nil {
		return err
	}
	current, err := m.Current(ctx)
	if err != nil {
		return err
	}
	if !current {
		return fmt.Errorf("schema %q has pending migrations; run `tributary migrate up` first", schema)
	}
	return nil
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

// installWorkflows adds the workflow coordinator's repair sweep and the
// demo workflows' task workers (demo.fanout, demo.chain), so `tributary
// workflows start` has a worker for them.
func installWorkflows(ctx context.Context, env *workerEnv) error {
	demoworkflows.Register(env.runtime)
	env.collectors = append(env.collectors, dashboard.NewWorkflowCollector(env.coordinator))
	return env.coordinator.Register(env.runtime)
}
