package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/tributary-run/tributary/cmd/tributary/internal/demojobs"
	"github.com/tributary-run/tributary/queue"
	"github.com/tributary-run/tributary/scheduler"
)

// demoSchedule is the harmless schedule every worker declares, so `make run`
// and `tributary schedules list` show a live schedule.
func demoSchedule() scheduler.Schedule {
	return scheduler.Schedule{Name: "demo.noop", Spec: "@every 1m", Args: demojobs.NoopArgs{}}
}

func newSchedulesCmd(a *app) *cobra.Command {
	cmd := subcommandsOnly(&cobra.Command{
		Use:   "schedules",
		Short: "List, trigger, pause or resume cron schedules",
		Long: `Schedules are declared in the worker's code; their state (next and last
run, paused) is in the database, so these commands work from any machine.
An unknown schedule NAME is a runtime failure (exit 1), like an unknown job id;
an empty NAME is a usage error (exit 2).`,
	})
	cmd.AddCommand(newSchedulesListCmd(a), newSchedulesTriggerCmd(a), newSchedulesBackfillCmd(a))
	for _, action := range []struct {
		name, short string
		fn          func(ctx context.Context, c *queue.Client, name string) error
		done        func(info *scheduler.Info) string
	}{
		{"pause", "Stop a schedule from firing on every worker until resumed", scheduler.Pause,
			func(*scheduler.Info) string { return "paused" }},
		{"resume", "Let a paused schedule fire again from its next fire time (missed fires are not made up)", scheduler.Resume,
			func(in *scheduler.Info) string {
				return "resumed; next run " + formatTime(in.NextRunAt)
			}},
	} {
		cmd.AddCommand(&cobra.Command{
			Use:   action.name + " NAME",
			Short: action.short,
			Args:  cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				if err := nonEmptyArg("NAME", args[0]); err != nil {
					return err
				}
				client, pool, err := a.client(cmd.Context())
				if err != nil {
					return err
				}
				defer pool.Close()
				if err := action.fn(cmd.Context(), client, args[0]); err != nil {
					return scheduleErr(args[0], err)
				}
				info, err := findSchedule(cmd.Context(), client, args[0])
				if err != nil {
					return err
				}
				fmt.Fprintf(a.stdout, "schedule %s %s\n", args[0], action.done(info))
				return nil
			},
		})
	}
	return cmd
}

// scheduleErr turns the scheduler's sentinel errors into one sentence.
func scheduleErr(name string, err error) error {
	if errors.Is(err, scheduler.ErrNotFound) {
		return fmt.Errorf("no schedule named %q; `tributary schedules list` shows them", name)
	}
	return err
}

func findSchedule(ctx context.Context, c *queue.Client, name string) (*scheduler.Info, error) {
	all, err := scheduler.List(ctx, c)
	if err != nil {
		return nil, err
	}
	for i := range all {
		if all[i].Name == name {
			return &all[i], nil
		}
	}
	return nil, scheduleErr(name, scheduler.ErrNotFound)
}

func formatTime(t time.Time) string { return t.Local().Format(time.DateTime) }

func newSchedulesListCmd(a *app) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List schedules with their next and last run",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			client, pool, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			defer pool.Close()
			all, err := scheduler.List(cmd.Context(), client)
			if err != nil {
				return err
			}
			if asJSON {
				return a.printJSON(map[string]any{"schedules": all})
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tSPEC\tTIMEZONE\tNEXT RUN\tLAST RUN\tLAST JOB\tPAUSED\tORPHANED")
			for _, in := range all {
				last, lastJob := "-", "-"
				if in.LastRunAt != nil {
					last = formatTime(*in.LastRunAt)
				}
				if in.LastJobID != nil {
					lastJob = fmt.Sprintf("%d %s", *in.LastJobID, in.LastJobState)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", in.Name, in.Spec, in.Timezone,
					formatTime(in.NextRunAt), last, lastJob, yesNo(in.Paused), yesNo(in.Orphaned))
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON document")
	return cmd
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func newSchedulesTriggerCmd(a *app) *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:   "trigger NAME",
		Short: "Insert a schedule's job now (its next fire time stays as it is)",
		Long: `Insert a schedule's job now, with the kind, args and options stored in the
database, without the declaring code. Works on paused schedules. Refuses an
orphaned schedule, and a schedule with overlap policy "skip" whose previous
job is unfinished unless --force.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := nonEmptyArg("NAME", args[0]); err != nil {
				return err
			}
			client, pool, err := a.client(cmd.Context())
			if err != nil {
				return err
			}
			defer pool.Close()
			host, _ := os.Hostname()
			id, err := scheduler.Trigger(cmd.Context(), client, args[0], scheduler.TriggerOpts{
				Force: force, FiredBy: fmt.Sprintf("cli:%s/%d", host, os.Getpid()),
			})
			if err != nil {
				return scheduleErr(args[0], err)
			}
			fmt.Fprintf(a.stdout, "schedule %s triggered: job %d\n", args[0], id)
			return nil
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "insert even if the previous job of an overlap-skip schedule is unfinished")
	return cmd
}
