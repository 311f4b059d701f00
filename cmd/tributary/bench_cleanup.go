package main

import (
	"github.com/spf13/cobra"

	"github.com/tributary-run/tributary/internal/bench"
	"github.com/tributary-run/tributary/scheduler"
)

func newBenchCleanupCmd(a *app) *cobra.Command {
	var rows, batchSize int
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "cleanup",
		Short: "Delete N SENT outbox rows past retention in bounded batches, beside one unbounded DELETE",
		Long: `Seed N SENT outbox rows past retention (and N/10 recent ones, which must
stay) in a fresh schema, delete them with the clean-up job's Cleaner
(bounded batches under a statement timeout), then reseed and delete the same
rows with one unbounded DELETE as the baseline. The longest statement bounds
how long any row lock was held.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if rows < 1 {
				return usagef("-n %d must be at least 1", rows)
			}
			if batchSize < 1 {
				return usagef("--batch %d must be at least 1", batchSize)
			}
			ctx := cmd.Context()
			pool, err := a.pool(ctx)
			if err != nil {
				return err
			}
			defer pool.Close()
			res, err := bench.RunCleanup(ctx, pool, rows, batchSize, a.benchReport(asJSON))
			if err != nil {
				return err
			}
			if asJSON {
				return a.printJSON(res)
			}
			return nil
		},
	}
	cmd.Flags().IntVarP(&rows, "n", "n", 1_000_000, "SENT rows past retention to delete")
	cmd.Flags().IntVar(&batchSize, "batch", scheduler.CleanupBatchSizeDefault, "rows per delete statement, at most")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON document")
	return cmd
}
