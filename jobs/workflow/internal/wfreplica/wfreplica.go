// Package wfreplica is the workload of the workflow replica tests: five-task
// diamond workflows worked by several processes, each task logging every
// start so the test can check, from recorded times, that no task started
// before its dependencies completed.
package wfreplica

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/tributary-run/tributary/jobs/workflow"
	"github.com/tributary-run/tributary/queue"
)

// CreateLogSQL creates the start log and the audit of output writes (a
// trigger on the task table counts every change of a task's output).
const CreateLogSQL = `
CREATE TABLE /*schema*/replica_start (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    workflow_id uuid NOT NULL,
    task        text NOT NULL,
    job_id      bigint NOT NULL,
    attempt     integer NOT NULL,
    replica     text NOT NULL,
    started_at  timestamptz NOT NULL
);
CREATE TABLE /*schema*/replica_output_write (
    workflow_id uuid NOT NULL,
    task        text NOT NULL,
    output      jsonb
);
CREATE FUNCTION /*schema*/replica_audit_output() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO /*schema*/replica_output_write (workflow_id, task, output) VALUES (NEW.workflow_id, NEW.name, NEW.output);
    RETURN NEW;
END $$;
CREATE TRIGGER replica_audit_output AFTER UPDATE OF output ON /*schema*/tributary_workflow_task
    FOR EACH ROW WHEN (NEW.output IS DISTINCT FROM OLD.output) EXECUTE FUNCTION /*schema*/replica_audit_output();`

// Middle are the middle tasks of a diamond: root -> each -> sink.
var Middle = []string{"m1", "m2", "m3"}

// Diamond is a five-task diamond workflow.
func Diamond(i int) *workflow.Workflow {
	wf := workflow.New("diamond", &workflow.Opts{ID: fmt.Sprint("diamond-", i)})
	wf.Add("root", TaskArgs{Task: "root"}, nil)
	for _, m := range Middle {
		wf.Add(m, TaskArgs{Task: m, Read: []string{"root"}}, &workflow.TaskOpts{Deps: []string{"root"}})
	}
	wf.Add("sink", TaskArgs{Task: "sink", Read: Middle}, &workflow.TaskOpts{Deps: Middle})
	return wf
}

// TaskArgs is one diamond task.
type TaskArgs struct {
	Task string   `json:"task"`
	Read []string `json:"read,omitempty"`
}

// Kind implements river.JobArgs.
func (TaskArgs) Kind() string { return "wfreplica.task" }

// Output is a task's output: a nonce of the attempt that completed it and
// the nonces it read from its dependencies.
type Output struct {
	Task  string            `json:"task"`
	Nonce string            `json:"nonce"`
	Read  map[string]string `json:"read,omitempty"`
}

// Config configures a Worker.
type Config struct {
	Schema     string
	Replica    string
	FailRate   float64       // share of attempts that fail (transiently)
	MaxLatency time.Duration // each attempt sleeps up to this
}

// Worker works diamond tasks.
type Worker struct {
	river.WorkerDefaults[TaskArgs]
	pool     *pgxpool.Pool
	cfg      Config
	startSQL string
}

// NewWorker returns a worker logging to pool's schema.
func NewWorker(pool *pgxpool.Pool, cfg Config) *Worker {
	return &Worker{pool: pool, cfg: cfg, startSQL: queue.Qualify(cfg.Schema, `INSERT INTO /*schema*/replica_start
        (workflow_id, task, job_id, attempt, replica, started_at) VALUES ($1, $2, $3, $4, $5, clock_timestamp())`)}
}

// NextRetry retries quickly.
func (w *Worker) NextRetry(*river.Job[TaskArgs]) time.Time {
	return time.Now().Add(20 * time.Millisecond)
}

// Work logs the start, sleeps, maybe fails, reads its dependencies' nonces
// and outputs its own.
func (w *Worker) Work(ctx context.Context, job *river.Job[TaskArgs]) error {
	ref, ok := workflow.Current(ctx)
	if !ok {
		return errors.New("not run as a workflow task")
	}
	if _, err := w.pool.Exec(ctx, w.startSQL, ref.WorkflowID, ref.Task, job.ID, job.Attempt, w.cfg.Replica); err != nil {
		return err
	}
	if w.cfg.MaxLatency > 0 {
		select {
		case <-time.After(time.Duration(mrand.Int64N(int64(w.cfg.MaxLatency)))):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if mrand.Float64() < w.cfg.FailRate {
		return fmt.Errorf("transient failure of %s (attempt %d)", ref.Task, job.Attempt)
	}
	out := Output{Task: job.Args.Task, Nonce: nonce()}
	for _, d := range job.Args.Read {
		o, err := workflow.Output[Output](ctx, d)
		if err != nil {
			return err
		}
		if out.Read == nil {
			out.Read = map[string]string{}
		}
		out.Read[d] = o.Nonce
	}
	return workflow.SetOutput(ctx, out)
}

func nonce() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
