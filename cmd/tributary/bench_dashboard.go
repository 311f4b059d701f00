package main

import (
	"context"
	"io"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/tributary-run/tributary/cmd/tributary/internal/bench"
)

func newBenchDashboardCmd(a *app) *cobra.Command {
	var o bench.DashboardOptions
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "dashboard",
		Short: "Time the dashboard's pages and /metrics on a job table of N rows and seeded workflows",
		Long: `Seed N river_job rows with COPY into a fresh schema (24 hours of history:
mostly completed, some discarded, cancelled, retryable and scheduled, a backlog
of available jobs in four queues, dispatch jobs of five event consumers) and
--workflows five-task workflows, VACUUM ANALYZE them, then request the
overview, the first and deep jobs pages (JSON and HTML, plus filtered pages),
/metrics, the consumers page and the workflows pages through the dashboard's
HTTP handler, one request at a time, and print p50/p95/p99.
In the same run, the baselines: a full GROUP BY count of the table, the
exact job counts 'tributary stats' prints, and River's own JobList first
page. The schema is dropped afterwards unless --keep.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.Rows < 1000 {
				return usagef("-n %d must be at least 1000", o.Rows)
			}
			if o.Requests < 10 {
				return usagef("--requests %d must be at least 10", o.Requests)
			}
			o.Logger = benchLogger(a)
			return a.runBench(cmd.Context(), asJSON, a.benchReport(asJSON), func(ctx context.Context, pool *pgxpool.Pool, w io.Writer) (any, error) {
				return bench.RunDashboard(ctx, pool, o, w)
			})
		},
	}
	cmd.Flags().IntVarP(&o.Rows, "n", "n", 1_000_000, "river_job rows to seed")
	cmd.Flags().IntVar(&o.Requests, "requests", 200, "timed requests per endpoint")
	cmd.Flags().IntVar(&o.Workflows, "workflows", bench.DashboardWorkflowsDefault, "five-task workflows to seed (a reused schema needs its seeding number; -1: none)")
	cmd.Flags().BoolVar(&o.Keep, "keep", false, "keep the seeded schema")
	cmd.Flags().StringVar(&o.Reuse, "reuse", "", "measure on this schema, seeded by an earlier --keep run, instead of seeding (migrated up first)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON document")
	return cmd
}
