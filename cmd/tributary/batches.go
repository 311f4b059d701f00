package main

import (
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/tributary-run/tributary/jobs/batch"
)

func newBatchesCmd(a *app) *cobra.Command {
	cmd := subcommandsOnly(&cobra.Command{
		Use:   "batches",
		Short: "Inspect batch flushes: staged items per stream and the objects written",
	})
	cmd.AddCommand(newBatchesListCmd(a))
	return cmd
}

func newBatchesListCmd(a *app) *cobra.Command {
	var (
		stream string
		limit  int
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List streams with staged items and the newest objects (claimed ones are being written)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if limit < 1 {
				return usagef("--limit %d must be at least 1", limit)
			}
			if stream != "" {
				if err := batch.ValidateStream(stream); err != nil {
					return usagef("invalid --stream: %v", err)
				}
			}
			ctx := cmd.Context()
			pool, err := a.pool(ctx)
			if err != nil {
				return err
			}
			defer pool.Close()
			streams, err := batch.ListStreams(ctx, pool, a.cfg.Schema, stream)
			if err != nil {
				return err
			}
			objs, err := batch.ListObjects(ctx, pool, a.cfg.Schema, batch.ListObjectsParams{Stream: stream, Limit: limit})
			if err != nil {
				return err
			}
			if asJSON {
				return a.printJSON(map[string]any{"sink": a.cfg.Batch.SinkURL, "streams": streams, "objects": objs})
			}
			return printBatches(a, streams, objs)
		},
	}
	cmd.Flags().StringVar(&stream, "stream", "", "only this stream")
	cmd.Flags().IntVar(&limit, "limit", batch.ListObjectsLimitDefault, "list at most this many objects, newest first")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON document")
	return cmd
}

func printBatches(a *app, streams []batch.StreamStatus, objs []batch.Object) error {
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	if len(streams) == 0 {
		fmt.Fprintln(tw, "no staged items")
	} else {
		fmt.Fprintln(tw, "STREAM\tSTAGED\tBYTES\tOLDEST")
		for _, s := range streams {
			count := fmt.Sprint(s.StagedItems)
			if s.CountCapped {
				count += "+"
			}
			oldest := "-"
			if s.OldestItemAt != nil {
				oldest = s.OldestItemAt.UTC().Format(time.RFC3339) + " (" + time.Since(*s.OldestItemAt).Round(time.Second).String() + " ago)"
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", s.Stream, count, s.StagedBytes, oldest)
		}
	}
	fmt.Fprintln(tw)
	if len(objs) == 0 {
		fmt.Fprintln(tw, "no objects")
		return tw.Flush()
	}
	fmt.Fprintln(tw, "ID\tSTREAM\tSTATUS\tITEMS\tBYTES\tGZIP\tWRITTEN\tKEY")
	for _, o := range objs {
		written := "-"
		if o.WrittenAt != nil {
			written = o.WrittenAt.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%d\t%d\t%s\t%s\n", o.ID, o.Stream, o.Status, o.Items, o.Bytes, o.CompressedBytes, written, o.Key)
	}
	return tw.Flush()
}
