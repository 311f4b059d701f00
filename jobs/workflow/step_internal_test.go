package workflow

import (
	"context"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/queue"
)

type idleArgs struct{}

func (idleArgs) Kind() string { return "wfinternal.idle" }

// TestStepTxConcurrentAttempts runs one StepTx from two attempts of the same
// job at once (a job handed on while its first process was only slow):
// the function's write happens once, and both attempts return its output.
func TestStepTxConcurrentAttempts(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	_, err := db.Pool.Exec(ctx, db.Q(`CREATE TABLE /*schema*/effect (n integer NOT NULL)`))
	require.NoError(t, err)
	qc, err := queue.NewClient(db.Pool, queue.ClientConfig{Schema: db.Schema, Logger: pgtest.Logger(t)})
	require.NoError(t, err)
	wf := New("concurrent", nil)
	wf.Add("t", idleArgs{}, &TaskOpts{InsertOpts: &river.InsertOpts{Queue: "idle"}})
	res, err := NewClient(qc).Insert(ctx, wf)
	require.NoError(t, err)
	coord, err := NewCoordinator(db.Pool, CoordinatorConfig{Schema: db.Schema})
	require.NoError(t, err)

	const attempts = 8
	outs := make([]int, attempts)
	errs := make([]error, attempts)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range attempts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tc := &taskContext{c: coord, ref: TaskRef{WorkflowID: res.ID, Task: "t", JobID: res.Jobs["t"]}}
			actx := withTask(ctx, tc)
			<-start
			outs[i], errs[i] = StepTx(actx, "charge", func(ctx context.Context, tx pgx.Tx) (int, error) {
				_, err := tx.Exec(ctx, db.Q(`INSERT INTO /*schema*/effect (n) VALUES ($1)`), i)
				return 100 + i, err
			})
		}()
	}
	close(start)
	wg.Wait()
	for i := range attempts {
		require.NoError(t, errs[i])
		require.Equal(t, outs[0], outs[i], "every attempt returns the one recorded output")
	}
	var n, written int
	require.NoError(t, db.Pool.QueryRow(ctx, db.Q(`SELECT count(*), max(n) FROM /*schema*/effect`)).Scan(&n, &written))
	require.Equal(t, 1, n, "the step's write happened once")
	require.Equal(t, outs[0], 100+written)
}

// TestStepConcurrentAttempts: two attempts of one job may both run a Step's
// function, but they agree on its output, the one recorded first.
func TestStepConcurrentAttempts(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	qc, err := queue.NewClient(db.Pool, queue.ClientConfig{Schema: db.Schema, Logger: pgtest.Logger(t)})
	require.NoError(t, err)
	wf := New("concurrent", nil)
	wf.Add("t", idleArgs{}, &TaskOpts{InsertOpts: &river.InsertOpts{Queue: "idle"}})
	res, err := NewClient(qc).Insert(ctx, wf)
	require.NoError(t, err)
	coord, err := NewCoordinator(db.Pool, CoordinatorConfig{Schema: db.Schema})
	require.NoError(t, err)
	const attempts = 8
	outs := make([]int, attempts)
	errs := make([]error, attempts)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range attempts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tc := &taskContext{c: coord, ref: TaskRef{WorkflowID: res.ID, Task: "t", JobID: res.Jobs["t"]}}
			<-start
			outs[i], errs[i] = Step(withTask(ctx, tc), "quote", func(ctx context.Context) (int, error) { return 100 + i, nil })
		}()
	}
	close(start)
	wg.Wait()
	var recorded int
	require.NoError(t, db.Pool.QueryRow(ctx, db.Q(`SELECT output::int FROM /*schema*/tributary_workflow_step WHERE name = 'quote'`)).Scan(&recorded))
	for i := range attempts {
		require.NoError(t, errs[i])
		require.Equal(t, recorded, outs[i], "attempt %d returns the recorded output", i)
	}
}
