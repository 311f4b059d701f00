package limits_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/internal/servicetest"
	"github.com/tributary-run/tributary/limits"
	"github.com/tributary-run/tributary/queue"
)

type keyedArgs struct {
	Customer string `json:"customer"`
	Fail     bool   `json:"fail,omitempty"`
}

func (keyedArgs) Kind() string { return "limits_test_keyed" }

// gateWorker blocks every job until its gate opens and fails a job once
// when its args say so (retried at once).
type gateWorker struct {
	river.WorkerDefaults[keyedArgs]
	gate    chan struct{}
	mu      sync.Mutex
	started []int64
}

func (w *gateWorker) NextRetry(*river.Job[keyedArgs]) time.Time { return time.Now() }

func (w *gateWorker) Work(ctx context.Context, job *river.Job[keyedArgs]) error {
	w.mu.Lock()
	w.started = append(w.started, job.ID)
	w.mu.Unlock()
	select {
	case <-w.gate:
	case <-ctx.Done():
		return ctx.Err()
	}
	if job.Args.Fail && job.Attempt == 1 {
		return errors.New("first attempt fails")
	}
	return nil
}

type testBundle struct {
	db       *pgtest.DB
	rt       *queue.Runtime
	worker   *gateWorker
	admitter *limits.Admitter
}

func setup(t *testing.T, lims ...limits.Limit) (*limits.Limiter, *testBundle) {
	t.Helper()
	db := pgtest.New(t)
	lim, err := limits.New(limits.Config{Limits: lims, Schema: db.Schema, Logger: pgtest.Logger(t), PollInterval: 100 * time.Millisecond})
	require.NoError(t, err)
	rt, err := queue.NewRuntime(db.Pool, queue.RuntimeConfig{
		Schema: db.Schema, Logger: pgtest.Logger(t), Queues: map[string]int{"default": 10},
		Middleware: []rivertype.Middleware{lim.Middleware()}, FetchPollInterval: 50 * time.Millisecond,
		RiverConfigFunc: func(c *river.Config) { c.SkipUnknownJobCheck = true },
	})
	require.NoError(t, err)
	w := &gateWorker{gate: make(chan struct{})}
	queue.AddWorker(rt, w)
	adm, err := lim.Register(rt)
	require.NoError(t, err)
	return lim, &testBundle{db: db, rt: rt, worker: w, admitter: adm}
}

func states(t *testing.T, db *pgtest.DB) map[string]int {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), db.Q(`SELECT state::text, count(*)::int FROM /*schema*/river_job GROUP BY 1`))
	require.NoError(t, err)
	out := map[string]int{}
	for rows.Next() {
		var s string
		var n int
		require.NoError(t, rows.Scan(&s, &n))
		out[s] = n
	}
	require.NoError(t, rows.Err())
	return out
}

// TestWaitingSpendsNoAttempt: jobs behind a busy key wait pending with no
// attempt counted; each runs with its first attempt once admitted, and a
// retry due at once keeps its slot (a later one waits for admission again:
// TestDoor).
func TestWaitingSpendsNoAttempt(t *testing.T) {
	t.Parallel()
	_, b := setup(t, limits.Limit{Name: "per-customer", Kind: "limits_test_keyed", KeyArg: "customer", Max: 1})
	ctx := context.Background()
	require.NoError(t, b.rt.Start(ctx))
	t.Cleanup(func() { _ = b.rt.Stop(context.Background()) })

	for range 3 {
		_, err := b.rt.Enqueue(ctx, keyedArgs{Customer: "c-1", Fail: true}, nil)
		require.NoError(t, err)
	}
	pgtest.WaitFor(t, 30*time.Second, "one job of c-1 running", func() (bool, error) {
		s := states(t, b.db)
		return s["running"] == 1 && s["pending"] == 2, nil
	})
	var maxAttempt int
	require.NoError(t, b.db.Pool.QueryRow(ctx, b.db.Q(`SELECT coalesce(max(attempt), 0) FROM /*schema*/river_job WHERE state = 'pending'`)).Scan(&maxAttempt))
	require.Zero(t, maxAttempt, "a waiting job has spent no attempt")

	st, err := limits.List(ctx, b.db.Pool, b.db.Schema)
	require.NoError(t, err)
	require.Len(t, st, 1)
	require.Equal(t, 1, st[0].Used)
	require.Equal(t, 2, st[0].Waiting)
	require.NotNil(t, st[0].OldestWaitingJobID)

	close(b.worker.gate)
	pgtest.WaitFor(t, 60*time.Second, "every job completed", func() (bool, error) {
		return states(t, b.db)["completed"] == 3, nil
	})
	// Each job failed its first attempt and completed its second: no
	// attempt was spent while waiting.
	var attempts []int
	rows, err := b.db.Pool.Query(ctx, b.db.Q(`SELECT attempt FROM /*schema*/river_job ORDER BY id`))
	require.NoError(t, err)
	for rows.Next() {
		var a int
		require.NoError(t, rows.Scan(&a))
		attempts = append(attempts, a)
	}
	require.Equal(t, []int{2, 2, 2}, attempts)

	// Each job was admitted once: a retry due at once goes from running
	// straight back to available, keeping its slot. The metrics say so.
	require.Equal(t, uint64(3), b.admitter.Stats()["per-customer"].Admitted)
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(limits.NewCollector(b.admitter)))
	families, err := reg.Gather()
	require.NoError(t, err)
	got := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			require.Equal(t, "per-customer", m.GetLabel()[0].GetValue())
			got[f.GetName()] = m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	require.Equal(t, 3.0, got["tributary_limit_admitted_jobs_total"])
	require.Equal(t, 1.0, got["tributary_limit_max"])
	require.Zero(t, got["tributary_limit_waiting"])
}

// TestDoor: a limited job that would become available other than by
// admission (a retry coming due) goes to pending instead; an override of 0
// admits nothing until it is reset.
func TestDoor(t *testing.T) {
	t.Parallel()
	lim, b := setup(t, limits.Limit{Name: "per-customer", Kind: "limits_test_keyed", KeyArg: "customer", Max: 2})
	ctx := context.Background()
	res, err := b.rt.Enqueue(ctx, keyedArgs{Customer: "c-1"}, nil)
	require.NoError(t, err)
	require.Equal(t, "pending", string(res.Job.State))
	require.Equal(t, "per-customer", gjson(t, b, res.Job.ID, `metadata->>'tributary_limit'`))
	require.Equal(t, "c-1", gjson(t, b, res.Job.ID, `metadata->>'tributary_limit_key'`))

	_, err = b.db.Pool.Exec(ctx, b.db.Q(`UPDATE /*schema*/river_job SET state = 'retryable' WHERE id = $1`), res.Job.ID)
	require.NoError(t, err)
	_, err = b.db.Pool.Exec(ctx, b.db.Q(`UPDATE /*schema*/river_job SET state = 'available' WHERE id = $1`), res.Job.ID)
	require.NoError(t, err)
	require.Equal(t, "pending", gjson(t, b, res.Job.ID, `state::text`))

	// Unlimited jobs pass as before.
	res2, err := b.rt.Enqueue(ctx, queue.RawArgs{KindName: "limits_test_other", JSON: []byte(`{}`)}, nil)
	require.NoError(t, err)
	require.Equal(t, "available", string(res2.Job.State))

	require.ErrorIs(t, limits.SetMax(ctx, b.db.Pool, b.db.Schema, "nope", 1), limits.ErrUnknownLimit)
	adm := lim.NewAdmitter(b.rt.Client)
	require.NoError(t, adm.Start(ctx)) // declares the limit
	t.Cleanup(func() { _ = adm.Stop(context.Background()) })
	pgtest.WaitFor(t, 30*time.Second, "the job admitted", func() (bool, error) {
		return gjson(t, b, res.Job.ID, `state::text`) == "available", nil
	})

	// A limit set to 0 admits nothing; reset, its declared Max applies.
	require.NoError(t, limits.SetMax(ctx, b.db.Pool, b.db.Schema, "per-customer", 0))
	second, err := b.rt.Enqueue(ctx, keyedArgs{Customer: "c-1"}, nil)
	require.NoError(t, err)
	n, err := adm.Pass(ctx, "per-customer")
	require.NoError(t, err)
	require.Zero(t, n)
	require.Equal(t, "pending", gjson(t, b, second.Job.ID, `state::text`))
	require.NoError(t, limits.ResetMax(ctx, b.db.Pool, b.db.Schema, "per-customer"))
	pgtest.WaitFor(t, 30*time.Second, "the second job admitted after the reset", func() (bool, error) {
		return gjson(t, b, second.Job.ID, `state::text`) == "available", nil
	})
}

func gjson(t *testing.T, b *testBundle, id int64, expr string) string {
	t.Helper()
	var s string
	require.NoError(t, b.db.Pool.QueryRow(context.Background(), b.db.Q(`SELECT `+expr+` FROM /*schema*/river_job WHERE id = $1`), id).Scan(&s))
	return s
}

func TestAdmitterContract(t *testing.T) {
	t.Parallel()
	servicetest.Run(t, "limits.Admitter", func(t *testing.T) (queue.Service, error) {
		lim, b := setup(t, limits.Limit{Name: "l", Max: 1})
		return lim.NewAdmitter(b.rt.Client), nil
	})
}

func jobStates(t *testing.T, b *testBundle, ids ...int64) []string {
	t.Helper()
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = gjson(t, b, id, `state::text`)
	}
	return out
}

// TestBusyCancelNewest: with the key's one slot taken, later jobs are
// cancelled instead of waiting.
func TestBusyCancelNewest(t *testing.T) {
	t.Parallel()
	_, b := setup(t, limits.Limit{Name: "doc", Kind: "limits_test_keyed", KeyArg: "customer", Max: 1, OnBusy: limits.BusyCancelNewest})
	ctx := context.Background()
	require.NoError(t, b.rt.Start(ctx))
	t.Cleanup(func() { _ = b.rt.Stop(context.Background()) })
	first, err := b.rt.Enqueue(ctx, keyedArgs{Customer: "c-1"}, nil)
	require.NoError(t, err)
	pgtest.WaitFor(t, 30*time.Second, "the first job running", func() (bool, error) {
		return gjson(t, b, first.Job.ID, `state::text`) == "running", nil
	})
	second, err := b.rt.Enqueue(ctx, keyedArgs{Customer: "c-1"}, nil)
	require.NoError(t, err)
	pgtest.WaitFor(t, 30*time.Second, "the second job cancelled", func() (bool, error) {
		return gjson(t, b, second.Job.ID, `state::text`) == "cancelled", nil
	})
	close(b.worker.gate)
	pgtest.WaitFor(t, 30*time.Second, "the first job completed", func() (bool, error) {
		return gjson(t, b, first.Job.ID, `state::text`) == "completed", nil
	})
}

// TestBusyCancelRunning: a newer job of the key cancels the running one
// and the older waiting ones, and runs.
func TestBusyCancelRunning(t *testing.T) {
	t.Parallel()
	_, b := setup(t, limits.Limit{Name: "doc", Kind: "limits_test_keyed", KeyArg: "customer", Max: 1, OnBusy: limits.BusyCancelRunning})
	ctx := context.Background()
	first, err := b.rt.Enqueue(ctx, keyedArgs{Customer: "c-1"}, nil)
	require.NoError(t, err)
	require.NoError(t, b.rt.Start(ctx))
	t.Cleanup(func() { _ = b.rt.Stop(context.Background()) })
	pgtest.WaitFor(t, 30*time.Second, "the first job running", func() (bool, error) {
		return gjson(t, b, first.Job.ID, `state::text`) == "running", nil
	})
	items := []queue.EnqueueItem{{Args: keyedArgs{Customer: "c-1"}}, {Args: keyedArgs{Customer: "c-1"}}}
	_, err = b.rt.EnqueueMany(ctx, items)
	require.NoError(t, err)
	var ids []int64
	rows, err := b.db.Pool.Query(ctx, b.db.Q(`SELECT id FROM /*schema*/river_job WHERE id > $1 ORDER BY id`), first.Job.ID)
	require.NoError(t, err)
	for rows.Next() {
		var id int64
		require.NoError(t, rows.Scan(&id))
		ids = append(ids, id)
	}
	require.NoError(t, rows.Err())
	require.Len(t, ids, 2)
	pgtest.WaitFor(t, 30*time.Second, "the newest job running, the others cancelled", func() (bool, error) {
		s := jobStates(t, b, first.Job.ID, ids[0], ids[1])
		return s[0] == "cancelled" && s[1] == "cancelled" && s[2] == "running", nil
	})
	close(b.worker.gate)
	pgtest.WaitFor(t, 30*time.Second, "the newest job completed", func() (bool, error) {
		return gjson(t, b, ids[1], `state::text`) == "completed", nil
	})
}

// laterRetryWorker fails its first attempt with a retry due after River's
// scheduler interval (5 s), so River's scheduler, not the executor, makes
// it available (a retry due sooner goes from running straight to
// available, keeping its slot).
type laterRetryWorker struct {
	river.WorkerDefaults[keyedArgs]
}

func (laterRetryWorker) NextRetry(*river.Job[keyedArgs]) time.Time {
	return time.Now().Add(6 * time.Second)
}

func (laterRetryWorker) Work(ctx context.Context, job *river.Job[keyedArgs]) error {
	if job.Attempt == 1 {
		return errors.New("first attempt fails")
	}
	return nil
}

// TestRetryWaitsForAdmission: a retry that comes due later goes through
// River's scheduler, meets the door and waits pending for admission like a
// new job, then runs.
func TestRetryWaitsForAdmission(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	lim, err := limits.New(limits.Config{Schema: db.Schema, Logger: pgtest.Logger(t), PollInterval: 100 * time.Millisecond,
		Limits: []limits.Limit{{Name: "retries", Kind: "limits_test_keyed", Max: 1}}})
	require.NoError(t, err)
	rt, err := queue.NewRuntime(db.Pool, queue.RuntimeConfig{
		Schema: db.Schema, Logger: pgtest.Logger(t), Queues: map[string]int{"default": 2},
		Middleware: []rivertype.Middleware{lim.Middleware()}, FetchPollInterval: 50 * time.Millisecond,
	})
	require.NoError(t, err)
	queue.AddWorker(rt, laterRetryWorker{})
	adm, err := lim.Register(rt)
	require.NoError(t, err)
	ctx := context.Background()
	res, err := rt.Enqueue(ctx, keyedArgs{Customer: "c-1"}, nil)
	require.NoError(t, err)
	require.NoError(t, rt.Start(ctx))
	t.Cleanup(func() { _ = rt.Stop(context.Background()) })
	var state string
	var attempt int
	pgtest.WaitFor(t, 60*time.Second, "the job completed on its second attempt", func() (bool, error) {
		err := db.Pool.QueryRow(ctx, db.Q(`SELECT state::text, attempt FROM /*schema*/river_job WHERE id = $1`), res.Job.ID).Scan(&state, &attempt)
		return state == "completed", err
	})
	require.Equal(t, 2, attempt)
	require.Equal(t, uint64(2), adm.Stats()["retries"].Admitted, "admitted at insert and again for its retry")
}
