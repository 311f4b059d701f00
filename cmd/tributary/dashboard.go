package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/tributary-run/tributary/dashboard"
	"github.com/tributary-run/tributary/internal/envconfig"
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
				addr = a.cfg.HTTPAddr
			} else if reason := dashboard.CheckAddr(addr); reason != "" {
				return usagef("invalid --addr %q: %s", addr, reason)
			}
			queues := a.cfg.DashboardAMQPQueues
			if cmd.Flags().Changed("amqp-queues") {
				var err error
				if queues, err = envconfig.ParseQueueNames(amqpQueues); err != nil {
					return usagef("invalid --amqp-queues %q: %v", amqpQueues, err)
				}
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
			srv, err := dashboard.New(client, dashboard.Config{Addr: addr, Token: a.cfg.DashboardToken, Logger: a.logger, AMQP: amqpCfg})
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

// installDashboard serves the dashboard from a worker started with --http,
// with counters of the jobs this process works.
func installDashboard(ctx context.Context, env *workerEnv) error {
	if env.httpAddr == "" {
		return nil
	}
	amqpCfg, err := dashboardAMQP(env.app, env.app.cfg.DashboardAMQPQueues)
	if err != nil {
		return err
	}
	_, _, err = dashboard.InstallWorker(env.runtime, dashboard.Config{
		Addr:       env.httpAddr,
		Token:      env.app.cfg.DashboardToken,
		Logger:     env.app.logger,
		AMQP:       amqpCfg,
		Collectors: env.collectors,
	})
	return err
}

// dashboardAMQP enables the AMQP page for queues when AMQP_URL is set.
func dashboardAMQP(a *app, queues []string) (*dashboard.AMQPConfig, error) {
	if a.cfg.AMQP.URL == "" {
		return nil, nil
	}
	cfg, err := a.cfg.Bridge(a.logger)
	if err != nil {
		return nil, err
	}
	cfg.ConnectionName = "tributary-dashboard"
	return &dashboard.AMQPConfig{Bridge: cfg, Queues: queues}, nil
}
