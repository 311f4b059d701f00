package main

import (
	"github.com/spf13/cobra"

	"github.com/tributary-run/tributary/internal/bench"
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
			ctx := cmd.Context()
			pool, err := a.pool(ctx)
			if err != nil {
				return err
			}
			defer pool.Close()
			rep, err := bench.RunJobs(ctx, pool, bench.JobsOptions{N: n, Rounds: rounds, Logger: benchLogger(a)}, a.benchReport(asJSON))
			if err != nil {
				return err
			}
			if asJSON {
				return a.printJSON(rep)
			}
			return nil
		},
	}
	cmd.Flags().IntVarP(&n, "n", "n", 100000, "jobs per side")
	cmd.Flags().IntVar(&rounds, "rounds", 1, "alternate the two sides this many times")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON document")
	return cmd
}
