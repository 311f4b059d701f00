package tributary

import (
	"context"
	"fmt"
	"os"
)

// Main is the whole life of a worker process that takes its configuration
// from the environment: it reads it (ConfigFromEnv), opens the App (Open:
// connects and migrates), calls setup with it, where the program adds its
// workers, consumers and schedules (AddWorker, On, App.AddSchedule) and may
// enqueue or emit, then runs it (Run) until SIGINT or SIGTERM. It returns
// after a clean stop; on any error, setup's included, it prints the error
// to standard error and exits with status 1. A program that sets
// Config fields in code uses Open and Run instead.
func Main(setup func(ctx context.Context, app *App) error) {
	if err := run(context.Background(), ConfigFromEnv, setup); err != nil {
		fmt.Fprintln(os.Stderr, "tributary:", err)
		os.Exit(1)
	}
}

// run is Main without the exit.
func run(ctx context.Context, load func() (Config, error), setup func(context.Context, *App) error) error {
	cfg, err := load()
	if err != nil {
		return err
	}
	app, err := Open(ctx, cfg)
	if err != nil {
		return err
	}
	if err := setup(ctx, app); err != nil {
		// Nothing started: Stop only closes the pool Open made.
		_ = app.Stop(ctx)
		return fmt.Errorf("setup: %w", err)
	}
	return app.Run(ctx)
}
