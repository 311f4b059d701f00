// Command tributary is the CLI and worker process of tributary: migrate the
// schema, run workers, enqueue jobs, emit events, inspect and act on jobs,
// outbox rows, schedules, dead letters and batches, serve the dashboard, and
// run the benchmarks. `tributary --help` lists the commands.
package main

import (
	"context"
	"os"
)

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}
