package main

import "github.com/spf13/cobra"

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
