package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"runtime/pprof"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
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
	return cmd
}

// cpuProfileFlag adds --cpuprofile to a benchmark's flags.
func cpuProfileFlag(f *pflag.FlagSet, path *string) {
	f.StringVar(path, "cpuprofile", "", "write a CPU profile of the run to this file")
}

// startCPUProfile starts a CPU profile into path ("" does nothing) and
// returns the function that stops it.
func startCPUProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, usagef("cannot create --cpuprofile %q: %v", path, err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// benchReport is where a benchmark writes its human report: stdout, or
// nowhere when stdout is for the --json document.
func (a *app) benchReport(asJSON bool) io.Writer {
	if asJSON {
		return io.Discard
	}
	return a.stdout
}

// runBench is the wiring every bench subcommand shares once its flags are
// checked: a pool on the configured database, a CPU profile into
// cpuProfile ("" for none), the benchmark writing its report to report,
// and its figures as one JSON document when asJSON.
func (a *app) runBench(ctx context.Context, asJSON bool, report io.Writer, cpuProfile string, run func(ctx context.Context, pool *pgxpool.Pool, report io.Writer) (any, error)) error {
	pool, err := a.pool(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	stopProfile, err := startCPUProfile(cpuProfile)
	if err != nil {
		return err
	}
	defer stopProfile()
	res, err := run(ctx, pool, report)
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
