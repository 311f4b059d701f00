package main

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
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
		Short: "List every limit (declared, and workflow concurrency keys') with its max, jobs or workflows holding a slot, the waiting ones and the oldest",
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
		if s.Holder == limits.HolderWorkflows {
			applies = "workflows of concurrency key " + strings.TrimPrefix(s.Name, limits.WorkflowPrefix)
		}
		if s.KeyArg != "" {
			applies += " per " + s.KeyArg
		}
		if s.Total > 0 {
			applies += fmt.Sprintf(", %d over all keys round-robin", s.Total)
			if s.TotalOverride != nil {
				applies += fmt.Sprintf(" (set; declared %s)", dashIfZero(s.DeclaredTotal))
			}
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
			if s.RateOverride != nil || s.PeriodOverride != nil {
				rate += fmt.Sprintf(" (set; declared %d/%s)", s.DeclaredRate, s.DeclaredPeriod)
			}
		}
		oldest := "-"
		if s.OldestWaitingJobID != nil && s.OldestWaitingSince != nil {
			oldest = fmt.Sprintf("job %d, since %s (%s ago)", *s.OldestWaitingJobID, formatTime(*s.OldestWaitingSince), time.Since(*s.OldestWaitingSince).Round(time.Second))
		}
		if s.OldestWaitingWorkflowID != "" && s.OldestWaitingSince != nil {
			oldest = fmt.Sprintf("workflow %s, since %s (%s ago)", s.OldestWaitingWorkflowID, formatTime(*s.OldestWaitingSince), time.Since(*s.OldestWaitingSince).Round(time.Second))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\n", s.Name, applies, maxText, rate, s.Used, s.BusiestKeyUsed, s.Keys, s.Waiting, oldest)
	}
	return tw.Flush()
}

func dashIfZero(n int) string {
	if n == 0 {
		return "-"
	}
	return strconv.Itoa(n)
}

func orAny(s string) string {
	if s == "" {
		return "*"
	}
	return s
}

func newLimitsSetCmd(a *app) *cobra.Command {
	var reset bool
	var total, rate int
	var period time.Duration
	cmd := &cobra.Command{
		Use:   "set NAME [MAX] [--total N] [--rate N] [--period D]",
		Short: "Override a limit's max (0 pauses it), total, rate or period in every process; --reset returns to the declared values",
		Args: func(cmd *cobra.Command, args []string) error {
			overrides := cmd.Flags().Changed("total") || cmd.Flags().Changed("rate") || cmd.Flags().Changed("period")
			switch {
			case len(args) == 0:
				return usagef("limits set takes a limit's name")
			case reset && (len(args) != 1 || overrides):
				return usagef("limits set --reset takes the limit's name only")
			case !reset && len(args) > 2:
				return usagef("limits set takes a limit's name and its new max, got %d arguments", len(args))
			case !reset && len(args) == 1 && !overrides:
				return usagef("limits set takes a limit's name and its new max, --total, --rate or --period (or --reset)")
			}
			if err := limits.ValidateName(args[0]); err != nil {
				return usagef("%v", err)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			var o limits.Override
			if len(args) == 2 {
				n, err := strconv.Atoi(args[1])
				if err != nil || n < 0 {
					return usagef("max %q: want a whole number, 0 or more", args[1])
				}
				o.Max = &n
			}
			if cmd.Flags().Changed("total") {
				if total < 1 {
					return usagef("--total %d: want a whole number, 1 or more", total)
				}
				o.Total = &total
			}
			if cmd.Flags().Changed("rate") {
				if rate < 1 {
					return usagef("--rate %d: want a whole number, 1 or more", rate)
				}
				o.Rate = &rate
			}
			if cmd.Flags().Changed("period") {
				if period < time.Millisecond {
					return usagef("--period %s: want at least 1ms", period)
				}
				o.Period = &period
			}
			ctx := cmd.Context()
			pool, err := a.pool(ctx)
			if err != nil {
				return err
			}
			defer pool.Close()
			if reset {
				err = limits.Reset(ctx, pool, a.cfg.Schema, name)
			} else {
				err = limits.Set(ctx, pool, a.cfg.Schema, name, o)
			}
			if errors.Is(err, limits.ErrUnknownLimit) {
				return fmt.Errorf("no limit named %q; `tributary limits list` shows them", name)
			}
			if err != nil {
				return err
			}
			if reset {
				fmt.Fprintf(a.stdout, "limit %s back to its declared values\n", name)
				return nil
			}
			fmt.Fprintf(a.stdout, "limit %s set to %s\n", name, describeOverride(o))
			return nil
		},
	}
	cmd.Flags().BoolVar(&reset, "reset", false, "drop every override: the declared values apply again")
	cmd.Flags().IntVar(&total, "total", 0, "jobs of all keys at once, served round-robin (at least 1)")
	cmd.Flags().IntVar(&rate, "rate", 0, "starts per period, by weight (at least 1; the limit must declare a Rate)")
	cmd.Flags().DurationVar(&period, "period", 0, "the rate's window, such as 1s or 1m (the limit must declare a Rate)")
	return cmd
}

// describeOverride says what o sets: "max 5", "rate 20, period 1s".
func describeOverride(o limits.Override) string {
	var parts []string
	if o.Max != nil {
		parts = append(parts, fmt.Sprintf("max %d", *o.Max))
	}
	if o.Total != nil {
		parts = append(parts, fmt.Sprintf("total %d", *o.Total))
	}
	if o.Rate != nil {
		parts = append(parts, fmt.Sprintf("rate %d", *o.Rate))
	}
	if o.Period != nil {
		parts = append(parts, fmt.Sprintf("period %s", *o.Period))
	}
	return strings.Join(parts, ", ")
}
