package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/tributary-run/tributary/cmd/tributary/internal/bench"
)

// benchCommands lists the `tributary bench` subcommands. Each feature adds
// its constructor here.
func benchCommands(a *app) []*cobra.Command {
	return []*cobra.Command{
		newBenchJobsCmd(a),
		newBenchBatchCmd(a),
		newBenchAMQPCmd(a),
		newBenchDashboardCmd(a),
		newBenchEventsCmd(a),
		newBenchCleanupCmd(a),
		newBenchWorkflowStepsCmd(a),
		newBenchWorkflowsCmd(a),
		newBenchLimitsCmd(a),
	}
}

func newBenchCmd(a *app) *cobra.Command {
	cmd := subcommandsOnly(&cobra.Command{
		Use:   "bench",
		Short: "Measure throughput and latency against a baseline in the same run",
	})
	for _, c := range benchCommands(a) {
		cmd.AddCommand(c)
	}
	cmd.PersistentFlags().StringVar(&a.benchCPUProfile, "cpuprofile", "",
		"write a CPU profile of the run to this file and print the functions the time went to")
	return cmd
}

// benchTopFunctions is how many functions a benchmark run with
// --cpuprofile prints.
const benchTopFunctions = 20

// benchReport is where a benchmark writes its human report: stdout, or
// nowhere when stdout is for the --json document.
func (a *app) benchReport(asJSON bool) io.Writer {
	if asJSON {
		return io.Discard
	}
	return a.stdout
}

// runBench is the wiring every bench subcommand shares once its flags are
// checked: a pool on the configured database, a CPU profile into the
// --cpuprofile file (none without the flag) whose top functions are printed
// after the report (to stderr beside --json), the benchmark writing its
// report to report, and its figures as one JSON document when asJSON.
func (a *app) runBench(ctx context.Context, asJSON bool, report io.Writer, run func(ctx context.Context, pool *pgxpool.Pool, report io.Writer) (any, error)) error {
	pool, err := a.pool(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	machine, err := bench.ProbeMachine(ctx, pool)
	if err != nil {
		return err
	}
	fmt.Fprintln(report, machine) // report is stderr under --json
	var prof *bench.CPUProfile
	if path := a.benchCPUProfile; path != "" {
		if prof, err = bench.StartCPUProfile(path); err != nil {
			return usagef("cannot write --cpuprofile %q: %v", path, err)
		}
	}
	res, err := run(ctx, pool, report)
	if prof != nil {
		top, total, perr := prof.Stop(benchTopFunctions)
		w := report
		if asJSON {
			w = a.stderr
		}
		if perr != nil {
			fmt.Fprintf(a.stderr, "error reading the CPU profile %s: %v\n", a.benchCPUProfile, perr)
		} else {
			bench.WriteTop(w, a.benchCPUProfile, prof.Wall, top, total)
		}
	}
	if err != nil {
		return err
	}
	if asJSON {
		return a.printJSON(res)
	}
	return nil
}

// benchLogger is the logger a benchmark gives the code it measures: errors
// only, so logging does not weigh on the figures.
func benchLogger(a *app) *slog.Logger {
	return slog.New(slog.NewTextHandler(a.stderr, &slog.HandlerOptions{Level: slog.LevelError}))
}
