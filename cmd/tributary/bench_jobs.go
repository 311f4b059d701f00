package main

import (
	"cmp"
	"fmt"
	"runtime"
	"slices"

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
			quiet := benchLogger(a)
			opts := bench.JobsOptions{N: n, Logger: quiet}
			var perSide [2][]bench.JobsResult
			for r := 0; r < rounds; r++ {
				for i, fn := range []func() (bench.JobsResult, error){
					func() (bench.JobsResult, error) { return bench.BareRiver(ctx, pool, opts) },
					func() (bench.JobsResult, error) { return bench.Tributary(ctx, pool, opts) },
				} {
					res, err := fn()
					if err != nil {
						return err
					}
					if !asJSON {
						fmt.Fprintf(a.stdout, "round %d  %-18s %8d jobs in %8.2fs  %10.0f jobs/s\n", r+1, res.Name, res.Jobs, res.Duration.Seconds(), res.JobsPerSec)
					}
					perSide[i] = append(perSide[i], res)
				}
			}
			best := [2]bench.JobsResult{median(perSide[0]), median(perSide[1])}
			ratio := best[1].JobsPerSec / best[0].JobsPerSec
			if asJSON {
				return a.printJSON(map[string]any{"baseline": best[0], "tributary": best[1], "ratio": ratio, "rounds": perSide, "cpus": runtime.NumCPU()})
			}
			fmt.Fprintf(a.stdout, "median: bare River %.0f jobs/s, tributary %.0f jobs/s, ratio %.2fx (%d CPUs)\n", best[0].JobsPerSec, best[1].JobsPerSec, ratio, runtime.NumCPU())
			return nil
		},
	}
	cmd.Flags().IntVarP(&n, "n", "n", 100000, "jobs per side")
	cmd.Flags().IntVar(&rounds, "rounds", 1, "alternate the two sides this many times")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON document")
	return cmd
}

// median returns the round with the median throughput (the lower middle one
// for an even count).
func median(rs []bench.JobsResult) bench.JobsResult {
	sorted := slices.Clone(rs)
	slices.SortFunc(sorted, func(a, b bench.JobsResult) int { return cmp.Compare(a.JobsPerSec, b.JobsPerSec) })
	return sorted[(len(sorted)-1)/2]
}
