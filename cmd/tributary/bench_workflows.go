package main

import (
	"context"
	"io"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/tributary-run/tributary/cmd/tributary/internal/bench"
	"github.com/tributary-run/tributary/jobs/workflow"
)

func newBenchWorkflowsCmd(a *app) *cobra.Command {
	var o bench.WorkflowsOptions
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "workflows",
		Short: "Work N diamond workflows beside N*5 plain jobs, a 1 -> W -> 1 fan-in and a chain, and compare",
		Long: `Three parts, each on a fresh schema, in one process run, all with the
demo.noop worker on the same runtime configuration as bench jobs (2,000
workers, 2 ms fetch cooldown, 20 ms poll interval) and the workflow
coordinator's middleware:

  (a) throughput: N five-task diamonds (a -> b,c,d -> e) inserted, then
      worked; tasks/s from the runtime's start to the last completion,
      beside N*5 plain jobs worked the same way (the baseline), and the
      ratio;
  (b) fan-in: one workflow 1 -> --width -> 1; the time from the last
      fan-out task's recorded completion to the fan-in task's start;
  (c) chain: one workflow of --length tasks in a line; per hop, a task's
      recorded completion to the next task's start, p50 and p99; beside
      it, the baseline: --length bare River jobs, each inserting the next,
      per hop from that insert to the next job's start. River's fetch
      cooldown bounds both from below.

With --rounds R each part runs R times (the diamonds alternating with their
baseline) and the median round counts. The load average is printed at the
start and the end.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.N < 1 {
				return usagef("-n %d must be at least 1", o.N)
			}
			if o.Width < 1 || o.Width > workflow.MaxTasks-2 {
				return usagef("--width %d must be 1 to %d", o.Width, workflow.MaxTasks-2)
			}
			if o.Length < 2 || o.Length > workflow.MaxTasks {
				return usagef("--length %d must be 2 to %d", o.Length, workflow.MaxTasks)
			}
			if o.Rounds < 1 {
				return usagef("--rounds %d must be at least 1", o.Rounds)
			}
			o.Logger = benchLogger(a)
			return a.runBench(cmd.Context(), asJSON, a.benchReport(asJSON), func(ctx context.Context, pool *pgxpool.Pool, w io.Writer) (any, error) {
				return bench.RunWorkflows(ctx, pool, o, w)
			})
		},
	}
	f := cmd.Flags()
	f.IntVarP(&o.N, "n", "n", 4000, "diamond workflows (the baseline works five times as many plain jobs)")
	f.IntVar(&o.Width, "width", 10000, "fan-out width of the fan-in workflow")
	f.IntVar(&o.Length, "length", 200, "tasks in the chain")
	f.IntVar(&o.Rounds, "rounds", 1, "run each part this many times; the median round counts")
	f.BoolVar(&asJSON, "json", false, "print one JSON document")
	return cmd
}
