// Command patchworker is the worker process of the Patched test: a task
// with three steps on "old" code, and on "new" code a fourth step behind
// workflow.Patched, until SIGTERM. Configuration: DATABASE_URL,
// TRIBUTARY_SCHEMA, PATCH_CODE (old or new), PATCH_BLOCK (a step whose
// function blocks until the process dies).
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/tributary-run/tributary"
	"github.com/tributary-run/tributary/jobs/workflow"
	"github.com/tributary-run/tributary/queue"
)

// Args is the patched task.
type Args struct{}

// Kind implements river.JobArgs.
func (Args) Kind() string { return "wftest.patch" }

// Output is what the task did in its last attempt.
type Output struct {
	Code    string   `json:"code"`
	Patched bool     `json:"patched"`
	Ran     []string `json:"ran"` // the steps whose functions ran in this attempt
}

type worker struct {
	river.WorkerDefaults[Args]
	code, block string
}

func (w *worker) Work(ctx context.Context, job *river.Job[Args]) error {
	var ran []string
	step := func(name string) error {
		_, err := workflow.Step(ctx, name, func(ctx context.Context) (string, error) {
			ran = append(ran, name)
			if name == w.block {
				<-ctx.Done()
				return "", ctx.Err()
			}
			return name, nil
		})
		return err
	}
	if err := step("a"); err != nil {
		return err
	}
	patched := false
	if w.code == "new" {
		var err error
		if patched, err = workflow.Patched(ctx, "add-x"); err != nil {
			return err
		}
		if patched {
			if err := step("x"); err != nil {
				return err
			}
		}
	}
	for _, name := range []string{"b", "c"} {
		if err := step(name); err != nil {
			return err
		}
	}
	return workflow.SetOutput(ctx, Output{Code: w.code, Patched: patched, Ran: ran})
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "patchworker:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx := context.Background()
	env, err := tributary.ConfigFromEnv()
	if err != nil {
		return err
	}
	cfg := queue.Config{DatabaseURL: env.DatabaseURL, Schema: env.Schema}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	pool, err := queue.NewPool(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	coord, err := workflow.NewCoordinator(pool, workflow.CoordinatorConfig{Schema: cfg.Schema, Logger: logger, RepairInterval: time.Second})
	if err != nil {
		return err
	}
	rt, err := queue.NewRuntime(pool, queue.RuntimeConfig{
		Schema: cfg.Schema, Logger: logger, Queues: map[string]int{"default": 5},
		FetchCooldown: 5 * time.Millisecond, FetchPollInterval: 200 * time.Millisecond, ShutdownTimeout: 5 * time.Second,
		// A killed process's task is rescued by process liveness within
		// seconds.
		LivenessTimeout: 5 * time.Second,
		Middleware:      []rivertype.Middleware{coord.Middleware()},
	})
	if err != nil {
		return err
	}
	queue.AddWorker(rt, &worker{code: os.Getenv("PATCH_CODE"), block: os.Getenv("PATCH_BLOCK")})
	if err := coord.Register(rt); err != nil {
		return err
	}
	return rt.Run(ctx)
}
