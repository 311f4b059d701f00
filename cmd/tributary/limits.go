package main

import (
	"errors"
	"fmt"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/tributary-run/tributary/limits"
)

func newLimitsCmd(a *app) *cobra.Command {
	cmd := subcommandsOnly(&cobra.Command{
		Use:   "limits",
		Short: "Inspect and adjust limits (concurrency and rate): use, waiting jobs, run-time overrides",
	})
	cmd.AddCommand(newLimitsListCmd(a), newLimitsSetCmd(a))
	return cmd
}

func newLimitsListCmd(a *app) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List every declared limit with its max, jobs holding a slot, waiting jobs and the oldest waiting job",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			pool, err := a.pool(ctx)
			if err != nil {
				return err
			}
			defer pool.Close()
			all, err := limits.List(ctx, pool, a.cfg.Schema)
			if err != nil {
				return err
			}
			if asJSON {
				if all == nil {
					all = []limits.Status{}
				}
				return a.printJSON(all)
			}
			return printLimits(a, all)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON document")
	return cmd
}

func printLimits(a *app, all []limits.Status) error {
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	if len(all) == 0 {
		fmt.Fprintln(tw, "no limits declared")
		return tw.Flush()
	}
	fmt.Fprintln(tw, "NAME\tAPPLIES TO\tMAX\tRATE\tUSED\tBUSIEST KEY\tKEYS\tWAITING\tOLDEST WAITING")
	for _, s := range all {
		applies := fmt.Sprintf("kind=%s queue=%s", orAny(s.Kind), orAny(s.Queue))
		if s.KeyArg != "" {
			applies += " per " + s.KeyArg
		}
		if s.Total > 0 {
			applies += fmt.Sprintf(", %d over all keys round-robin", s.Total)
		}
		if s.OnBusy != limits.BusyQueue {
			applies += ", busy: " + string(s.OnBusy)
		}
		maxText := strconv.Itoa(s.Max)
		if s.Max == 0 && s.Override == nil {
			maxText = "-"
		}
		if s.Override != nil {
			maxText += fmt.Sprintf(" (set; declared %d)", s.DeclaredMax)
		}
		rate := "-"
		if s.Rate > 0 {
			rate = fmt.Sprintf("%d/%s (%d used)", s.Rate, s.Period, s.Started)
		}
		oldest := "-"
		if s.OldestWaitingJobID != nil && s.OldestWaitingSince != nil {
			oldest = fmt.Sprintf("job %d, since %s (%s ago)", *s.OldestWaitingJobID, formatTime(*s.OldestWaitingSince), time.Since(*s.OldestWaitingSince).Round(time.Second))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\n", s.Name, applies, maxText, rate, s.Used, s.BusiestKeyUsed, s.Keys, s.Waiting, oldest)
	}
	return tw.Flush()
}

func orAny(s string) string {
	if s == "" {
		return "*"
	}
	return s
}

func newLimitsSetCmd(a *app) *cobra.Command {
	var reset bool
	cmd := &cobra.Command{
		Use:   "set NAME [N]",
		Short: "Override a limit's max in every process (0 pauses it); --reset returns to the declared max",
		Args: func(cmd *cobra.Command, args []string) error {
			switch {
			case reset && len(args) != 1:
				return usagef("limits set --reset takes the limit's name only")
			case !reset && len(args) != 2:
				return usagef("limits set takes a limit's name and its new max (or --reset)")
			}
			if err := limits.ValidateName(args[0]); err != nil {
				return usagef("%v", err)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			n := 0
			if !reset {
				var err error
				if n, err = strconv.Atoi(args[1]); err != nil || n < 0 {
					return usagef("max %q: want a whole number, 0 or more", args[1])
				}
			}
			ctx := cmd.Context()
			pool, err := a.pool(ctx)
			if err != nil {
				return err
			}
			defer pool.Close()
			if reset {
				err = limits.ResetMax(ctx, pool, a.cfg.Schema, args[0])
			} else {
				err = limits.SetMax(ctx, pool, a.cfg.Schema, args[0], n)
			}
			if errors.Is(err, limits.ErrUnknownLimit) {
				return fmt.Errorf("no limit named %q; `tributary limits list` shows them", args[0])
			}
			if err != nil {
				return err
			}
			if reset {
				fmt.Fprintf(a.stdout, "limit %s back to its declared max\n", args[0])
			} else {
				fmt.Fprintf(a.stdout, "limit %s set to %d\n", args[0], n)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&reset, "reset", false, "drop the override: the declared max applies again")
	return cmd
}
