package main

import (
	"context"
	"io"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/tributary-run/tributary/cmd/tributary/internal/bench"
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
			return a.runBench(cmd.Context(), asJSON, a.benchReport(asJSON), func(ctx context.Context, pool *pgxpool.Pool, w io.Writer) (any, error) {
				return bench.RunCleanup(ctx, pool, rows, batchSize, w)
			})
		},
	}
	cmd.Flags().IntVarP(&rows, "n", "n", 1_000_000, "SENT rows past retention to delete")
	cmd.Flags().IntVar(&batchSize, "batch", scheduler.CleanupBatchSizeDefault, "rows per delete statement, at most")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON document")
	return cmd
}
