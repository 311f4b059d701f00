package main

import (
	"context"
	"io"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/tributary-run/tributary/cmd/tributary/internal/bench"
)

func newBenchJobsCmd(a *app) *cobra.Command {
	var n, rounds int
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "jobs",
		Short: "Work N demo.noop jobs with tributary's runtime and with a bare River client, and compare",
		Long: `Insert N demo.noop jobs and work them with tributary's runtime, then do the
same on a bare River client configured like River's own benchmark (2,000
workers, 2 ms fetch cooldown, 20 ms poll interval), each on a fresh schema, in
the same process run. Prints jobs/s for both and the ratio. With --rounds R
the two alternate R times and the median round of each counts, so a burst of
load from elsewhere on the machine does not decide the result.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if n < 1 {
				return usagef("-n %d must be at least 1", n)
			}
			if rounds < 1 {
				return usagef("--rounds %d must be at least 1", rounds)
			}
			return a.runBench(cmd.Context(), asJSON, a.benchReport(asJSON), func(ctx context.Context, pool *pgxpool.Pool, w io.Writer) (any, error) {
				return bench.RunJobs(ctx, pool, bench.JobsOptions{N: n, Rounds: rounds, Logger: benchLogger(a)}, w)
			})
		},
	}
	cmd.Flags().IntVarP(&n, "n", "n", 100000, "jobs per side")
	cmd.Flags().IntVar(&rounds, "rounds", 1, "alternate the two sides this many times")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON document")
	return cmd
}
