package main

import "github.com/spf13/cobra"

// commands lists the top-level commands. Each feature adds its constructor
// here.
func commands(a *app) []*cobra.Command {
	return []*cobra.Command{
		newMigrateCmd(a),
		newWorkerCmd(a),
		newEnqueueCmd(a),
		newJobsCmd(a),
		newStatsCmd(a),
		newBatchesCmd(a),
		newBenchCmd(a),
		newSchedulesCmd(a),
		newDLQCmd(a),
		newDashboardCmd(a),
		newEmitCmd(a),
		newOutboxCmd(a),
		newLanesCmd(a),
		newConsumersCmd(a),
		newWorkflowsCmd(a),
		newLimitsCmd(a),
		newVersionCmd(a),
	}
}
