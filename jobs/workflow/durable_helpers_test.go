package workflow_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/jobs/workflow"
	"github.com/tributary-run/tributary/queue"
)

// durableArgs is the test task of the durable-step tests: step "one" (a
// Step whose side effect is a row in wftest_effect), an optional failure,
// step "tx" (a StepTx writing a row in its transaction), an optional sleep
// and signal wait, and step "two". Every side effect is a row, so counts
// survive processes.
type durableArgs struct {
	Name        string `json:"name"`
	FailOnce    bool   `json:"fail_once,omitempty"`    // fail attempt 1 after step "tx"
	BlockAfter  string `json:"block_after,omitempty"`  // block (until killed) after this step
	SleepMS     int    `json:"sleep_ms,omitempty"`     // Sleep "nap"
	Signal      string `json:"signal,omitempty"`       // AwaitSignal
	TimeoutMS   int    `json:"timeout_ms,omitempty"`   // its timeout
	NoTxStep    bool   `json:"no_tx_step,omitempty"`   // leave out step "tx"
	StepTwice   bool   `json:"step_twice,omitempty"`   // use step name "one" twice
	Expand      int    `json:"expand,omitempty"`       // Expand this many tasks
	ExpandSink  string `json:"expand_sink,omitempty"`  // ... which this pending task then waits for
	Child       bool   `json:"child,omitempty"`        // start a child workflow and wait for it
	ChildSignal string `json:"child_signal,omitempty"` // the child's task waits for this signal
	BigStep     bool   `json:"big_step,omitempty"`     // a step whose output is over the limit
	ManySteps   int    `json:"many_steps,omitempty"`   // run this many extra steps
	ExpandTx    bool   `json:"expand_tx,omitempty"`    // Expand in a StepTx's transaction
}

func (durableArgs) Kind() string { return "wftest.durable" }

type durableOutput struct {
	Task      string          `json:"task"`
	One       int             `json:"one"`
	Two       int             `json:"two"`
	Signal    json.RawMessage `json:"signal,omitempty"`
	TimedOut  bool            `json:"timed_out,omitempty"`
	ChildStat string          `json:"child_status,omitempty"`
}

const createEffectSQL = `
CREATE TABLE /*schema*/wftest_effect (task text NOT NULL, step text NOT NULL, attempt integer NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp())`

type durableWorker struct {
	river.WorkerDefaults[durableArgs]
	pool   *pgxpool.Pool
	schema string
	client func() *workflow.Client
}

func (w *durableWorker) NextRetry(*river.Job[durableArgs]) time.Time {
	return time.Now().Add(10 * time.Millisecond)
}

func (w *durableWorker) Work(ctx context.Context, job *river.Job[durableArgs]) error {
	a := job.Args
	insertEffect := func(ctx context.Context, exec func(ctx context.Context, sql string, args ...any) error, step string) error {
		return exec(ctx, queue.Qualify(w.schema, `INSERT INTO /*schema*/wftest_effect (task, step, attempt) VALUES ($1, $2, $3)`), a.Name, step, job.Attempt)
	}
	poolExec := func(ctx context.Context, sql string, args ...any) error {
		_, err := w.pool.Exec(ctx, sql, args...)
		return err
	}
	block := func(step string) {
		if a.BlockAfter == step && job.Attempt == 1 {
			<-ctx.Done() // until the process is killed
		}
	}
	out := durableOutput{Task: a.Name}
	for i := range a.ManySteps {
		if _, err := workflow.Step(ctx, fmt.Sprint("many-", i), func(ctx context.Context) (int, error) { return i, nil }); err != nil {
			return err
		}
	}
	if a.BigStep {
		if _, err := workflow.Step(ctx, "big", func(ctx context.Context) (string, error) {
			return strings.Repeat("x", workflow.StepOutputMaxBytes), nil
		}); err != nil {
			return err
		}
	}
	one, err := workflow.Step(ctx, "one", func(ctx context.Context) (int, error) {
		return 1, insertEffect(ctx, poolExec, "one")
	})
	if err != nil {
		return err
	}
	out.One = one
	if a.StepTwice {
		if _, err := workflow.Step(ctx, "one", func(ctx context.Context) (int, error) { return 2, nil }); err != nil {
			return err
		}
	}
	block("one")
	if !a.NoTxStep {
		if _, err := workflow.StepTx(ctx, "tx", func(ctx context.Context, tx pgx.Tx) (int, error) {
			txExec := func(ctx context.Context, sql string, args ...any) error {
				_, err := tx.Exec(ctx, sql, args...)
				return err
			}
			return 0, insertEffect(ctx, txExec, "tx")
		}); err != nil {
			return err
		}
	}
	if a.FailOnce && job.Attempt == 1 {
		return errors.New("attempt 1 fails after its steps")
	}
	if a.SleepMS > 0 {
		if err := workflow.Sleep(ctx, "nap", time.Duration(a.SleepMS)*time.Millisecond); err != nil {
			return err
		}
		if _, err := workflow.Step(ctx, "woke", func(ctx context.Context) (int, error) {
			return 0, insertEffect(ctx, poolExec, "woke")
		}); err != nil {
			return err
		}
	}
	if a.Signal != "" {
		p, err := workflow.AwaitSignal[json.RawMessage](ctx, a.Signal, time.Duration(a.TimeoutMS)*time.Millisecond)
		switch {
		case errors.Is(err, workflow.ErrSignalTimeout):
			out.TimedOut = true
		case err != nil:
			return err
		default:
			out.Signal = p
		}
	}
	if a.Expand > 0 {
		tasks := make([]workflow.ExpandTask, a.Expand)
		for i := range tasks {
			name := fmt.Sprintf("%s-x%d", a.Name, i)
			tasks[i] = workflow.ExpandTask{Name: name, Args: durableArgs{Name: name, NoTxStep: true}}
			if a.ExpandSink != "" {
				tasks[i].Dependents = []string{a.ExpandSink}
			}
		}
		if a.ExpandTx {
			if _, err := workflow.StepTx(ctx, "expand", func(ctx context.Context, tx pgx.Tx) (int, error) {
				return len(tasks), workflow.Expand(ctx, tx, tasks...)
			}); err != nil {
				return err
			}
			if job.Attempt == 1 {
				return errors.New("attempt 1 fails after its expansion")
			}
		} else if err := workflow.Expand(ctx, nil, tasks...); err != nil {
			return err
		}
	}
	if a.Child {
		child := workflow.New("child", nil)
		child.Add("c1", durableArgs{Name: a.Name + "-c1", NoTxStep: true, Signal: a.ChildSignal}, nil)
		res, err := workflow.RunChild(ctx, "child", child)
		if err != nil {
			return err
		}
		out.ChildStat = string(res.Status)
	}
	two, err := workflow.Step(ctx, "two", func(ctx context.Context) (int, error) {
		return 2, insertEffect(ctx, poolExec, "two")
	})
	if err != nil {
		return err
	}
	out.Two = two
	return workflow.SetOutput(ctx, out)
}

type durableBundle struct {
	steps  *stepWorker
	db     *pgtest.DB
	client *workflow.Client
	coord  *workflow.Coordinator
	rt     *queue.Runtime
}

// setupDurable starts a runtime with the coordinator and the durable
// worker on db (a fresh schema when nil).
func setupDurable(t *testing.T, db *pgtest.DB, rcfg queue.RuntimeConfig) *durableBundle {
	t.Helper()
	if db == nil {
		db = pgtest.New(t)
		_, err := db.Pool.Exec(context.Background(), db.Q(createEffectSQL))
		require.NoError(t, err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			dumpJobs(t, db)
		}
	})
	coord, err := workflow.NewCoordinator(db.Pool, workflow.CoordinatorConfig{Schema: db.Schema, Logger: pgtest.Logger(t)})
	require.NoError(t, err)
	b := &durableBundle{db: db, coord: coord, steps: newStepWorker()}
	rcfg.Middleware = []rivertype.Middleware{coord.Middleware()}
	w := &durableWorker{pool: db.Pool, schema: db.Schema, client: func() *workflow.Client { return b.client }}
	b.rt = pgtest.StartRuntime(t, db, rcfg, func(rt *queue.Runtime) {
		queue.AddWorker(rt, w)
		queue.AddWorker(rt, b.steps)
		require.NoError(t, coord.Register(rt))
	})
	b.client = workflow.NewClient(b.rt.Client)
	return b
}

func (b *durableBundle) waitStatus(t *testing.T, id string, status workflow.Status) *workflow.Details {
	t.Helper()
	var d *workflow.Details
	pgtest.WaitFor(t, 60*time.Second, fmt.Sprintf("workflow %s to be %s", id, status), func() (bool, error) {
		var err error
		d, err = b.client.Get(context.Background(), id)
		return err == nil && d.Status == status, err
	})
	return d
}

// effects counts the side effects of task's step.
func effects(t *testing.T, db *pgtest.DB, task, step string) int {
	t.Helper()
	var n int
	require.NoError(t, db.Pool.QueryRow(context.Background(), db.Q(`SELECT count(*) FROM /*schema*/wftest_effect WHERE task = $1 AND step = $2`), task, step).Scan(&n))
	return n
}

// waitStepRecorded waits until task's step has had its side effect and its
// record has committed. Waiting for the effect alone is not enough: the
// effect commits before the record, and a process killed between the two
// runs the step again on its next attempt, as Step documents.
func waitStepRecorded(t *testing.T, db *pgtest.DB, task, step string) {
	t.Helper()
	pgtest.WaitFor(t, 30*time.Second, fmt.Sprintf("step %s of %s recorded", step, task), func() (bool, error) {
		var done bool
		err := db.Pool.QueryRow(context.Background(), db.Q(`SELECT EXISTS (SELECT FROM /*schema*/tributary_workflow_step WHERE task = $1 AND name = $2 AND done)`), task, step).Scan(&done)
		return done && effects(t, db, task, step) > 0, err
	})
}

// waitWaiting waits until the task's job is snoozed (scheduled), i.e. the
// task waits holding no slot.
func waitSnoozed(t *testing.T, db *pgtest.DB, jobID int64) {
	t.Helper()
	pgtest.WaitFor(t, 30*time.Second, fmt.Sprintf("job %d to be snoozed", jobID), func() (bool, error) {
		// River writes a snooze shorter than its scheduler interval as
		// available with a scheduled_at ahead.
		var snoozed bool
		err := db.Pool.QueryRow(context.Background(), "SELECT state = 'scheduled' OR (state = 'available' AND scheduled_at > now()) FROM "+db.Schema+".river_job WHERE id = $1", jobID).Scan(&snoozed)
		return snoozed, err
	})
}

func durableOutputOf(t *testing.T, task workflow.TaskInfo) durableOutput {
	t.Helper()
	require.NotNil(t, task.Output, "task %s has an output", task.Name)
	var o durableOutput
	require.NoError(t, json.Unmarshal(task.Output, &o))
	return o
}

// dumpJobs logs the schema's jobs, tasks and steps, for a failed test.
func dumpJobs(t *testing.T, db *pgtest.DB) {
	db.LogRows(t,
		`SELECT id, kind, state::text, attempt, max_attempts, scheduled_at::text, metadata::text, coalesce(errors::text, '') FROM /*schema*/river_job ORDER BY id`,
		`SELECT workflow_id::text, name, state, job_id, pending_deps, updated_at::text FROM /*schema*/tributary_workflow_task ORDER BY workflow_id, name`,
		`SELECT job_id, name, kind, done, timed_out, coalesce(wake_at::text, ''), coalesce(output::text, '') FROM /*schema*/tributary_workflow_step ORDER BY job_id, name`,
		`SELECT id, name, coalesce(idempotency_key, ''), coalesce(consumed_job_id, 0) FROM /*schema*/tributary_workflow_signal ORDER BY id`)
}
