package main

import (
	"context"
	"io"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/tributary-run/tributary/cmd/tributary/internal/bench"
)

func newBenchWorkflowStepsCmd(a *app) *cobra.Command {
	var o bench.WorkflowStepsOptions
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "workflow-steps",
		Short: "Measure Workflows II: signal -> resume latency, a durable step's overhead, sleep lateness",
		Long: `Measure Workflows II on a fresh schema, in one process:

  signal      --waiting workflows wait for a signal (snoozed, holding no slot);
              each is signalled in turn and the time from the send to the task
              running past its AwaitSignal is taken (p50, p99, max)
  steps       one task runs --steps Steps, another --steps StepTxs, each call
              timed; the baseline is the same work called plainly in a River
              job; the overhead is the difference of the medians
  sleep       --sleepers tasks Sleep --sleep each; how late each ran past its
              wake-up time`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			switch {
			case o.Waiting < 1 || o.Steps < 1 || o.Sleepers < 1:
				return usagef("--waiting, --steps and --sleepers must be at least 1")
			case o.Steps > 1000:
				return usagef("--steps %d is more than the %d steps a task may record", o.Steps, 1000)
			case o.Sleep <= 0:
				return usagef("--sleep %s must be positive", o.Sleep)
			}
			o.Logger = benchLogger(a)
			return a.runBench(cmd.Context(), asJSON, a.benchReport(asJSON), func(ctx context.Context, pool *pgxpool.Pool, w io.Writer) (any, error) {
				return bench.RunWorkflowSteps(ctx, pool, o, w)
			})
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.Waiting, "waiting", 100, "workflows waiting for a signal at once")
	f.IntVar(&o.Steps, "steps", 500, "steps per task in the overhead phase (at most 1000)")
	f.IntVar(&o.Sleepers, "sleepers", 50, "tasks sleeping at once")
	f.DurationVar(&o.Sleep, "sleep", 6*time.Second, "how long each sleeps (longer than River's 5 s scheduler interval, so its snooze is written scheduled)")
	f.BoolVar(&asJSON, "json", false, "print one JSON document")
	return cmd
}
