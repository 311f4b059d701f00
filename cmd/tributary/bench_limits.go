package main

import (
	"context"
	"io"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/tributary-run/tributary/cmd/tributary/internal/bench"
)

func newBenchLimitsCmd(a *app) *cobra.Command {
	opts := bench.LimitsOptions{}
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "limits",
		Short: "Work N demo.noop jobs without limits and under a limit that does not bind, and a run under a binding rate limit",
		Long: `Work N demo.noop jobs with tributary's runtime without limits and with a
limit declared that matches every job but never binds, alternating for
--rounds rounds (the median of each counts; the target ratio is at least
0.9), then 5×--rate jobs under a binding rate limit of --rate a second (the
target is the limit ± 5 %), each on a fresh schema.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			switch {
			case opts.N < 1:
				return usagef("-n %d must be at least 1", opts.N)
			case opts.Rounds < 1:
				return usagef("--rounds %d must be at least 1", opts.Rounds)
			case opts.Rate < 0:
				return usagef("--rate %d must not be negative", opts.Rate)
			case opts.Workers < 1:
				return usagef("--workers %d must be at least 1", opts.Workers)
			}
			opts.Logger = benchLogger(a)
			return a.runBench(cmd.Context(), asJSON, a.benchReport(asJSON), func(ctx context.Context, pool *pgxpool.Pool, w io.Writer) (any, error) {
				return bench.RunLimits(ctx, pool, opts, w)
			})
		},
	}
	cmd.Flags().IntVarP(&opts.N, "n", "n", 20000, "jobs per unbound side")
	cmd.Flags().IntVar(&opts.Rounds, "rounds", 3, "alternate the unbound sides this many times")
	cmd.Flags().IntVar(&opts.Rate, "rate", 500, "starts a second of the binding rate limit (0 skips that run)")
	cmd.Flags().IntVar(&opts.Workers, "workers", 200, "the queue's workers in each run")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON document")
	return cmd
}
