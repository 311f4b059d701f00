package main

import (
	"github.com/spf13/cobra"

	"github.com/tributary-run/tributary/jobs/batch"
	"github.com/tributary-run/tributary/jobs/workflow"
)

// newWorkflowsArchivedCmd lists the archive of finished workflows: the
// recorded objects of the batch stream workflow.ArchiveStream (the
// clean-up writes and records them, workflow.ArchiveCleanup), and any
// items staged into that stream.
func newWorkflowsArchivedCmd(a *app) *cobra.Command {
	var limit int
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "archived",
		Short: "List the objects finished workflows were archived into (Cleanup.ArchiveWorkflows), newest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if limit < 1 {
				return usagef("--limit %d must be at least 1", limit)
			}
			ctx := cmd.Context()
			pool, err := a.pool(ctx)
			if err != nil {
				return err
			}
			defer pool.Close()
			streams, err := batch.ListStreams(ctx, pool, a.cfg.Schema, workflow.ArchiveStream)
			if err != nil {
				return err
			}
			objs, err := batch.ListObjects(ctx, pool, a.cfg.Schema, batch.ListObjectsParams{Stream: workflow.ArchiveStream, Limit: limit})
			if err != nil {
				return err
			}
			if asJSON {
				return a.printJSON(map[string]any{"sink": a.cfg.Batch.SinkURL, "stream": workflow.ArchiveStream, "staged": streams, "objects": objs})
			}
			return printBatches(a, streams, objs)
		},
	}
	cmd.Flags().IntVar(&limit, "limit", batch.ListObjectsLimitDefault, "list at most this many objects, newest first")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON document")
	return cmd
}
