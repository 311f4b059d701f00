package main

import (
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/tributary-run/tributary/jobs/events"
)

func newConsumersCmd(a *app) *cobra.Command {
	cmd := subcommandsOnly(&cobra.Command{
		Use:   "consumers",
		Short: "List the event consumers, remove one no worker runs any more",
		Long: `Every worker records the consumers it runs, at start and every minute. A
consumer no live worker has run for its InactiveAfter (default 72h) stops
receiving new events; its work so far waits until a worker runs it again or it
is removed.`,
	})
	cmd.AddCommand(newConsumersListCmd(a), newConsumersRemoveCmd(a))
	return cmd
}

func newConsumersListCmd(a *app) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List consumers: subscriptions, last seen by a live worker, unfinished dispatches, blocked lanes",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			pool, err := a.pool(ctx)
			if err != nil {
				return err
			}
			defer pool.Close()
			list, err := events.ListConsumers(ctx, pool, a.cfg.Schema)
			if err != nil {
				return err
			}
			if asJSON {
				return a.printJSON(map[string]any{"consumers": list})
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tSUBSCRIPTIONS\tQUEUE\tORDERING\tLAST SEEN\tACTIVE\tPENDING\tBLOCKED LANES")
			for _, c := range list {
				active := "yes"
				if !c.Active {
					active = "no (inactive after " + c.InactiveAfter + ")"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\n", c.Name, oneLine(strings.Join(c.Patterns, ","), 60), c.Queue, c.Ordering,
					c.SeenAt.Local().Format(time.DateTime)+" ("+time.Since(c.SeenAt).Round(time.Second).String()+" ago)", active, c.Pending, c.BlockedLanes)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON document")
	return cmd
}

func newConsumersRemoveCmd(a *app) *cobra.Command {
	var force, asJSON bool
	cmd := &cobra.Command{
		Use:   "remove NAME",
		Short: "Remove a consumer no worker runs any more, with its unfinished dispatches and its lanes",
		Long: `Remove a consumer that was renamed or removed from the code: first its row, so no
new events are dispatched to it, then its unfinished dispatch jobs and its
ordering lanes. Its finished jobs stay until River's retention. A consumer a
worker recorded in the last 5 minutes is refused unless --force: stop the
workers that run it first (a worker that still runs it registers it again
when it restarts).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if err := checkConsumerName(name); err != nil {
				return err
			}
			ctx := cmd.Context()
			pool, err := a.pool(ctx)
			if err != nil {
				return err
			}
			defer pool.Close()
			res, err := events.RemoveConsumer(ctx, pool, a.cfg.Schema, name, events.RemoveConsumerOpts{Force: force})
			switch {
			case errors.Is(err, events.ErrUnknownConsumer):
				return usagef("%v", err)
			case errors.Is(err, events.ErrConsumerLive):
				return usagef("%v with --force", err)
			case err != nil:
				return err
			}
			if asJSON {
				return a.printJSON(res)
			}
			fmt.Fprintf(a.stdout, "removed consumer %s: %d unfinished dispatch job(s), %d lane(s)", res.Name, res.Jobs, res.Lanes)
			if res.Running > 0 {
				fmt.Fprintf(a.stdout, "; %d running dispatch job(s) are cancelled when they end", res.Running)
			}
			fmt.Fprintln(a.stdout)
			return nil
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "remove it even if a worker recorded it in the last 5 minutes")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON document")
	return cmd
}
