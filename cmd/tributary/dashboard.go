package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/tributary-run/tributary"
	"github.com/tributary-run/tributary/dashboard"
	"github.com/tributary-run/tributary/migrations"
	"github.com/tributary-run/tributary/queue"
)

func newDashboardCmd(a *app) *cobra.Command {
	var addr, amqpQueues string
	cmd := &cobra.Command{
		Use:   "dashboard",
		Short: "Serve the dashboard, its JSON API, /metrics and health checks",
		Long: `Serve the dashboard on its own (without working jobs): overview, jobs,
workflows, outbox, schedules, batches and AMQP pages, the same data as JSON
under /api/, /metrics, /healthz and /readyz. Actions (retry, cancel, delete,
replay, trigger, pause, resume) need TRIBUTARY_DASHBOARD_TOKEN; without it the
dashboard is read-only. Binds to TRIBUTARY_HTTP_ADDR (default
127.0.0.1:8080). Job run counters are exported by worker processes started
with --http, which work the jobs; this process exports the database gauges.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.Flags().Changed("addr") && addr == "" {
				return usagef("--addr needs an address such as 127.0.0.1:8080")
			}
			if addr == "" {
				addr = cmp.Or(a.cfg.Dashboard.Addr, dashboard.AddrDefault)
			} else if reason := dashboard.CheckAddr(addr); reason != "" {
				return usagef("invalid --addr %q: %s", addr, reason)
			}
			queues := a.cfg.Dashboard.AMQPQueues
			if cmd.Flags().Changed("amqp-queues") {
				// The flag takes the variable's place, read by its one reader.
				cfg, err := tributary.ConfigFromEnvWith(map[string]string{amqpQueuesVar: amqpQueues})
				var ce *queue.ConfigError
				if errors.As(err, &ce) && ce.Name == amqpQueuesVar {
					return usagef("invalid --amqp-queues %q: %s", amqpQueues, ce.Reason)
				} else if err != nil {
					return err
				}
				queues = cfg.Dashboard.AMQPQueues
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			client, pool, err := a.client(ctx)
			if err != nil {
				return err
			}
			defer pool.Close()
			if err := checkMigrated(ctx, pool, a.cfg.Schema); err != nil {
				return err
			}
			amqpCfg, err := dashboardAMQP(a, queues)
			if err != nil {
				return err
			}
			srv, err := dashboard.New(client, dashboard.Config{Addr: addr, Token: a.cfg.Dashboard.Token, Logger: a.logger, AMQP: amqpCfg})
			if err != nil {
				return err
			}
			svc := dashboard.NewService(addr, srv.Handler(), a.logger)
			if err := svc.Start(ctx); err != nil {
				return err
			}
			a.logger.InfoContext(ctx, "dashboard serving", "url", "http://"+svc.Addr()+"/", "read_only", srv.ReadOnly())
			<-ctx.Done()
			stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			if err := svc.Stop(stopCtx); err != nil && !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("error stopping the dashboard: %w", err)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&addr, "addr", "", "listen address (default TRIBUTARY_HTTP_ADDR or 127.0.0.1:8080)")
	cmd.Flags().StringVar(&amqpQueues, "amqp-queues", "", "AMQP queues to show and allow DLQ replay for, as name,name (default TRIBUTARY_DASHBOARD_AMQP_QUEUES); needs AMQP_URL")
	return cmd
}

// amqpQueuesVar is the variable --amqp-queues overrides.
const amqpQueuesVar = "TRIBUTARY_DASHBOARD_AMQP_QUEUES"

// dashboardAMQP enables the AMQP page for queues when AMQP_URL is set.
func dashboardAMQP(a *app, queues []string) (*dashboard.AMQPConfig, error) {
	if a.cfg.AMQP.Bridge.URL == "" {
		return nil, nil
	}
	cfg := a.bridge()
	cfg.ConnectionName = "tributary-dashboard"
	return &dashboard.AMQPConfig{Bridge: cfg, Queues: queues}, nil
}

// checkMigrated refuses to serve a schema that lacks migrations, with the
// command that fixes it.
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
