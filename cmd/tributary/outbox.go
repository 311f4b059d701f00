package main

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/tributary-run/tributary/jobs/events"
)

func newOutboxCmd(a *app) *cobra.Command {
	cmd := subcommandsOnly(&cobra.Command{
		Use:   "outbox",
		Short: "List outbox rows and replay failed or sent events",
	})
	cmd.AddCommand(newOutboxListCmd(a), newOutboxReplayCmd(a))
	return cmd
}

func newOutboxListCmd(a *app) *cobra.Command {
	var status string
	var limit int
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List outbox rows, newest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			status = strings.ToUpper(status)
			if status != "" && !slices.Contains(events.Statuses(), status) {
				return usagef("unknown --status %q: want one of %s", status, strings.Join(events.Statuses(), ", "))
			}
			if limit < 1 {
				return usagef("--limit %d must be at least 1", limit)
			}
			ctx := cmd.Context()
			pool, err := a.pool(ctx)
			if err != nil {
				return err
			}
			defer pool.Close()
			rows, err := events.ListOutbox(ctx, pool, a.cfg.Schema, events.ListParams{Status: status, Limit: limit})
			if err != nil {
				return err
			}
			if asJSON {
				return a.printJSON(map[string]any{"rows": rows})
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tSTATUS\tEVENT TYPE\tAGGREGATE\tRETRIES\tCREATED\tLAST ERROR")
			for _, r := range rows {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", r.ID, r.Status, r.EventType, outboxDash(r.AggregateID),
					r.RetryCount, r.CreatedAt.Local().Format(time.DateTime), outboxDash(emitPreview(r.LastError, 60)))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVar(&status, "status", "", "only rows in this status: "+strings.Join(events.Statuses(), ", "))
	cmd.Flags().IntVar(&limit, "limit", 100, "most rows to list")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON document")
	return cmd
}

func newOutboxReplayCmd(a *app) *cobra.Command {
	var failed, asJSON bool
	cmd := &cobra.Command{
		Use:   "replay ID...|--failed",
		Short: "Send SENT or FAILED outbox rows again (all or nothing)",
		Long: `Put the named outbox rows (SENT or FAILED) back to PENDING so the forwarders
send them again; with --failed, every FAILED row. A replayed SENT event reaches
every consumer again. If any id is unknown or still pending, nothing changes.
--failed works in batches of 1,000 rows, each committed on its own (progress on
stderr); if it fails midway, the batches before stay replayed.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if failed == (len(args) > 0) {
				return usagef("outbox replay needs outbox ids or --failed, not both")
			}
			ctx := cmd.Context()
			pool, err := a.pool(ctx)
			if err != nil {
				return err
			}
			defer pool.Close()
			var n int
			if failed {
				// Batches commit one by one; a long replay says how far it got.
				n, err = events.ReplayFailedBatches(ctx, pool, a.cfg.Schema, events.ReplayFailedParams{
					ProgressFunc: func(replayed int) {
						if replayed >= events.ReplayBatchSizeDefault {
							fmt.Fprintf(a.stderr, "replayed %d FAILED outbox row(s) so far\n", replayed)
						}
					},
				})
			} else {
				n, err = events.ReplayOutbox(ctx, pool, a.cfg.Schema, args)
			}
			if err != nil {
				if errors.Is(err, events.ErrNotReplayable) || errors.Is(err, events.ErrInvalidOutboxID) {
					return usagef("%v", err)
				}
				return err
			}
			if asJSON {
				return a.printJSON(map[string]int{"replayed": n})
			}
			fmt.Fprintf(a.stdout, "replayed %d outbox row(s)\n", n)
			return nil
		},
	}
	cmd.Flags().BoolVar(&failed, "failed", false, "replay every FAILED row")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON document")
	return cmd
}

func outboxDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
