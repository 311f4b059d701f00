package workflow_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/jobs/workflow"
	"github.com/tributary-run/tributary/queue"
)

// TestSignalBeforeWait sends the signal while the waiting task is still
// pending behind a dependency: the signal is kept and the task gets it at
// once when it runs.
func TestSignalBeforeWait(t *testing.T) {
	t.Parallel()
	b := setupDurable(t, nil, queue.RuntimeConfig{})
	ctx := context.Background()
	wf := workflow.New("early", &workflow.Opts{ID: "order-1"})
	wf.Add("gate", stepArgs{Name: "gate", Wait: true}, nil)
	wf.Add("w", durableArgs{Name: "w", Signal: "approve"}, &workflow.TaskOpts{Deps: []string{"gate"}})
	res, err := b.client.Insert(ctx, wf)
	require.NoError(t, err)
	// By the caller key, in the caller's transaction.
	err = pgx.BeginFunc(ctx, b.db.Pool, func(tx pgx.Tx) error {
		sr, err := b.client.SignalTx(ctx, tx, "order-1", "approve", map[string]string{"by": "ana"}, nil)
		require.NoError(t, err)
		require.Equal(t, res.ID, sr.WorkflowID)
		require.Zero(t, sr.Woken, "nobody waits yet")
		return nil
	})
	require.NoError(t, err)
	b.steps.Release("gate")
	d := b.waitStatus(t, res.ID, workflow.StatusCompleted)
	out := durableOutputOf(t, taskByName(t, d, "w"))
	require.JSONEq(t, `{"by":"ana"}`, string(out.Signal))
}

// TestSignalAfterWait sends the signal once the task waits (its job
// snoozed, holding no slot): the signal wakes it, the steps before the
// wait are not run again, and the wait used no attempt.
func TestSignalAfterWait(t *testing.T) {
	t.Parallel()
	b := setupDurable(t, nil, queue.RuntimeConfig{})
	ctx := context.Background()
	wf := workflow.New("late", nil)
	wf.Add("w", durableArgs{Name: "w", Signal: "approve"}, &workflow.TaskOpts{InsertOpts: &river.InsertOpts{MaxAttempts: 1}})
	res, err := b.client.Insert(ctx, wf)
	require.NoError(t, err)
	waitSnoozed(t, b.db, res.Jobs["w"])
	d, err := b.client.Get(ctx, res.ID)
	require.NoError(t, err)
	require.Equal(t, workflow.StatusRunning, d.Status)
	waiting := taskByName(t, d, "w")
	require.Equal(t, &workflow.Wait{Kind: "signal", Name: "approve"}, waiting.WaitingFor, "what the task waits for")
	require.Equal(t, 3, waiting.Steps, "one, tx and the wait")

	sr, err := b.client.Signal(ctx, res.ID, "approve", json.RawMessage(`{"ok":true}`), nil)
	require.NoError(t, err)
	require.Equal(t, 1, sr.Woken)
	d = b.waitStatus(t, res.ID, workflow.StatusCompleted)
	task := taskByName(t, d, "w")
	require.JSONEq(t, `{"ok":true}`, string(durableOutputOf(t, task).Signal))
	require.Equal(t, 1, effects(t, b.db, "w", "one"), "step one ran once")
	require.Equal(t, 1, effects(t, b.db, "w", "tx"))
	require.Equal(t, 1, effects(t, b.db, "w", "two"))
	require.Equal(t, 1, task.Attempts, "the wait used no attempt")
}

// TestSignalRace sends signals to many waiting tasks at the moment they
// start to wait, so that some arrive while the job's snooze is not yet
// written: every task still resumes well before its re-check.
func TestSignalRace(t *testing.T) {
	t.Parallel()
	b := setupDurable(t, nil, queue.RuntimeConfig{Queues: map[string]int{"default": 20}})
	ctx := context.Background()
	const n = 40
	ids := make([]string, n)
	for i := range ids {
		wf := workflow.New("race", nil)
		wf.Add("w", durableArgs{Name: "race", NoTxStep: true, Signal: "go"}, nil)
		res, err := b.client.Insert(ctx, wf)
		require.NoError(t, err)
		ids[i] = res.ID
	}
	// Signal each as soon as its wait is recorded.
	for _, id := range ids {
		pollUntil(t, 30*time.Second, func() bool {
			var n int
			require.NoError(t, b.db.Pool.QueryRow(ctx, b.db.Q(`SELECT count(*) FROM /*schema*/tributary_workflow_step WHERE workflow_id = $1 AND name = 'signal:go'`), id).Scan(&n))
			return n == 1
		})
		_, err := b.client.Signal(ctx, id, "go", 1, nil)
		require.NoError(t, err)
	}
	for _, id := range ids {
		b.waitStatus(t, id, workflow.StatusCompleted)
	}
}

func pollUntil(t *testing.T, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		require.True(t, time.Now().Before(deadline), "condition not met within %s", timeout)
		time.Sleep(2 * time.Millisecond)
	}
}

func TestSignalIdempotent(t *testing.T) {
	t.Parallel()
	b := setupDurable(t, nil, queue.RuntimeConfig{})
	ctx := context.Background()
	wf := workflow.New("idem", nil)
	wf.Add("gate", stepArgs{Name: "gate", Wait: true}, nil)
	wf.Add("w1", durableArgs{Name: "w1", NoTxStep: true, Signal: "pay"}, &workflow.TaskOpts{Deps: []string{"gate"}})
	wf.Add("w2", durableArgs{Name: "w2", NoTxStep: true, Signal: "pay", TimeoutMS: 1500}, &workflow.TaskOpts{Deps: []string{"w1"}})
	res, err := b.client.Insert(ctx, wf)
	require.NoError(t, err)
	first, err := b.client.Signal(ctx, res.ID, "pay", "first", &workflow.SignalOpts{IdempotencyKey: "payment-9"})
	require.NoError(t, err)
	require.False(t, first.Duplicate)
	again, err := b.client.Signal(ctx, res.ID, "pay", "again", &workflow.SignalOpts{IdempotencyKey: "payment-9"})
	require.NoError(t, err)
	require.True(t, again.Duplicate)
	require.Zero(t, again.SignalID)
	b.steps.Release("gate")
	d := b.waitStatus(t, res.ID, workflow.StatusCompleted)
	// w1 consumed the one signal; the duplicate never existed, so w2
	// timed out.
	require.JSONEq(t, `"first"`, string(durableOutputOf(t, taskByName(t, d, "w1")).Signal))
	require.True(t, durableOutputOf(t, taskByName(t, d, "w2")).TimedOut)
	var n int
	require.NoError(t, b.db.Pool.QueryRow(ctx, b.db.Q(`SELECT count(*) FROM /*schema*/tributary_workflow_signal`)).Scan(&n))
	require.Equal(t, 1, n)
}

func TestSignalTimeout(t *testing.T) {
	t.Parallel()
	b := setupDurable(t, nil, queue.RuntimeConfig{})
	ctx := context.Background()
	wf := workflow.New("timeout", nil)
	wf.Add("w", durableArgs{Name: "w", Signal: "approve", TimeoutMS: 500}, &workflow.TaskOpts{InsertOpts: &river.InsertOpts{MaxAttempts: 1}})
	res, err := b.client.Insert(ctx, wf)
	require.NoError(t, err)
	start := time.Now()
	d := b.waitStatus(t, res.ID, workflow.StatusCompleted)
	require.True(t, durableOutputOf(t, taskByName(t, d, "w")).TimedOut)
	require.GreaterOrEqual(t, time.Since(start), 500*time.Millisecond)
	// A signal after the timeout is stored but nobody consumes it.
	_, err = b.client.Signal(ctx, res.ID, "approve", 1, nil)
	require.ErrorIs(t, err, workflow.ErrFinished)
}

func TestSignalErrors(t *testing.T) {
	t.Parallel()
	b := setupDurable(t, nil, queue.RuntimeConfig{})
	ctx := context.Background()
	_, err := b.client.Signal(ctx, "no-such-workflow", "approve", 1, nil)
	var nf *workflow.NotFoundError
	require.ErrorAs(t, err, &nf)
	require.Equal(t, "no-such-workflow", nf.Ref)

	wf := workflow.New("errs", nil)
	wf.Add("w", stepArgs{Name: "w"}, &workflow.TaskOpts{InsertOpts: idleQueue()})
	res, err := b.client.Insert(ctx, wf)
	require.NoError(t, err)
	_, err = b.client.Signal(ctx, res.ID, "approve", strings.Repeat("x", workflow.SignalPayloadMaxBytes), nil)
	var le *workflow.LimitError
	require.ErrorAs(t, err, &le)
	require.Equal(t, "approve", le.Name)
	_, err = b.client.Signal(ctx, res.ID, "", 1, nil)
	require.ErrorContains(t, err, "signal name is empty")
	_, err = b.client.Signal(ctx, res.ID, "approve", func() {}, nil)
	require.ErrorContains(t, err, `error encoding the payload of signal "approve"`)
	var n int
	require.NoError(t, b.db.Pool.QueryRow(ctx, b.db.Q(`SELECT count(*) FROM /*schema*/tributary_workflow_signal`)).Scan(&n))
	require.Zero(t, n, "nothing stored")
}
