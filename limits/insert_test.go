package limits_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/limits"
	"github.com/tributary-run/tributary/queue"
)

// TestAdmitAtInsert: a job of a declared concurrency limit is inserted
// available while its key has room and pending once it has none; it waits
// behind jobs of its key already waiting, and a rate limit's job, or one
// inserted in a REPEATABLE READ transaction, waits for the admitter.
func TestAdmitAtInsert(t *testing.T) {
	t.Parallel()
	lim, b := setup(t,
		limits.Limit{Name: "per-customer", Kind: "limits_test_keyed", KeyArg: "customer", Max: 2},
		limits.Limit{Name: "hourly", Kind: "limits_test_rated", Rate: 5, Period: time.Hour})
	ctx := context.Background()
	require.NoError(t, lim.Declare(ctx, b.db.Pool))
	enqueue := func(customer string) *rivertype.JobRow {
		t.Helper()
		res, err := b.rt.Enqueue(ctx, keyedArgs{Customer: customer}, nil)
		require.NoError(t, err)
		return res.Job
	}
	first, second, third := enqueue("c-1"), enqueue("c-1"), enqueue("c-1")
	require.Equal(t, []string{"available", "available", "pending"}, jobStates(t, b, first.ID, second.ID, third.ID))
	require.Equal(t, "pending", string(third.State), "the insert returns the state the trigger chose")
	require.Equal(t, "available", string(enqueue("c-2").State), "another key has room")

	// A slot freed while a job of the key waits goes to the waiting job.
	_, err := b.db.Pool.Exec(ctx, b.db.Q(`DELETE FROM /*schema*/river_job WHERE id = $1`), first.ID)
	require.NoError(t, err)
	require.Equal(t, "pending", string(enqueue("c-1").State), "a new job waits behind the waiting one")

	rated, err := b.rt.Enqueue(ctx, queue.RawArgs{KindName: "limits_test_rated", JSON: []byte(`{}`)}, nil)
	require.NoError(t, err)
	require.Equal(t, "pending", string(rated.Job.State), "a rate limit admits through the admitter only")

	tx, err := b.db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	res, err := b.rt.EnqueueTx(ctx, tx, keyedArgs{Customer: "c-3"}, nil)
	require.NoError(t, err)
	require.Equal(t, "pending", string(res.Job.State), "in the caller's transaction a job waits for the admitter (TestCallersTransactionHoldsNoLimit)")
	require.NoError(t, tx.Rollback(ctx))

	// The trigger admits only where its count sees what others admitted.
	rr, err := b.db.Pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	require.NoError(t, err)
	defer func() { _ = rr.Rollback(ctx) }()
	var state string
	require.NoError(t, rr.QueryRow(ctx, b.db.Q(`INSERT INTO /*schema*/river_job (args, kind, max_attempts, metadata, state)
        VALUES ('{}', 'limits_test_keyed', 1, '{"tributary_limit": "per-customer", "tributary_limit_key": "c-4", "tributary_limit_admit": true}', 'available')
        RETURNING state::text`)).Scan(&state))
	require.Equal(t, "pending", state, "a REPEATABLE READ snapshot cannot count what others admit")
}

// concurrencyWorker records, per key, the most jobs in Work at once.
type concurrencyWorker struct {
	river.WorkerDefaults[keyedArgs]
	mu      sync.Mutex
	running map[string]int
	most    map[string]int
}

func (w *concurrencyWorker) Work(ctx context.Context, job *river.Job[keyedArgs]) error {
	w.mu.Lock()
	w.running[job.Args.Customer]++
	w.most[job.Args.Customer] = max(w.most[job.Args.Customer], w.running[job.Args.Customer])
	w.mu.Unlock()
	select {
	case <-time.After(2 * time.Millisecond):
	case <-ctx.Done():
	}
	w.mu.Lock()
	w.running[job.Args.Customer]--
	w.mu.Unlock()
	return ctx.Err()
}

// TestAdmitAtInsertRacesAdmitters: inserters admitting at insert, one job
// per transaction and in batches, race two admitters (two runtimes on one
// schema) over a limit of 3 per key while the jobs run: no key ever has
// more than 3 jobs in Work, nor more than 3 running or available in any
// sample, and every job completes.
func TestAdmitAtInsertRacesAdmitters(t *testing.T) {
	t.Parallel()
	const maxPerKey, inserters, perInserter = 3, 6, 40
	db := pgtest.New(t)
	ctx := context.Background()
	limit := limits.Limit{Name: "replica-per-key", Kind: "limits_test_keyed", KeyArg: "customer", Max: maxPerKey}
	w := &concurrencyWorker{running: map[string]int{}, most: map[string]int{}}
	var rts []*queue.Runtime
	for range 2 {
		lim, err := limits.New(limits.Config{Limits: []limits.Limit{limit}, Schema: db.Schema, Logger: pgtest.Logger(t), PollInterval: 100 * time.Millisecond})
		require.NoError(t, err)
		rt, err := queue.NewRuntime(db.Pool, queue.RuntimeConfig{
			Schema: db.Schema, Logger: pgtest.Logger(t), Queues: map[string]int{"default": 10},
			Middleware: []rivertype.Middleware{lim.Middleware()}, FetchPollInterval: 20 * time.Millisecond,
		})
		require.NoError(t, err)
		queue.AddWorker(rt, w)
		_, err = lim.Register(rt)
		require.NoError(t, err)
		require.NoError(t, rt.Start(ctx))
		t.Cleanup(func() { _ = rt.Stop(context.Background()) })
		rts = append(rts, rt)
	}
	var wg sync.WaitGroup
	errs := make(chan error, inserters)
	for i := range inserters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rt := rts[i%2]
			for j := 0; j < perInserter; j += 4 {
				key := fmt.Sprintf("k-%d", j%3)
				if i%2 == 0 {
					items := make([]queue.EnqueueItem, 4)
					for n := range items {
						items[n] = queue.EnqueueItem{Args: keyedArgs{Customer: key}}
					}
					if _, err := rt.EnqueueMany(ctx, items); err != nil {
						errs <- err
						return
					}
					continue
				}
				for range 4 {
					if _, err := rt.Enqueue(ctx, keyedArgs{Customer: key}, nil); err != nil {
						errs <- err
						return
					}
				}
			}
		}()
	}
	ks := keySampler{limit: maxPerKey}
	pgtest.WaitFor(t, 2*time.Minute, "every job completed", func() (bool, error) {
		return ks.sample(t, db) == inserters*perInserter, nil
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	var done int
	require.NoError(t, db.Pool.QueryRow(ctx, db.Q(`SELECT count(*) FROM /*schema*/river_job WHERE state = 'completed'`)).Scan(&done))
	w.mu.Lock()
	defer w.mu.Unlock()
	for key, most := range w.most {
		require.LessOrEqual(t, most, maxPerKey, "key %s had %d jobs in Work at once", key, most)
	}
	t.Logf("%d jobs, %d samples, most in Work per key %v, most running or available per key %d", done, ks.samples, w.most, ks.maxHolding)
}

// TestCallersTransactionHoldsNoLimit: a limited job inserted in the
// caller's transaction waits for the admitter instead of being admitted at
// insert, so the transaction, however long it stays open, holds nothing of
// its limit: meanwhile another job of the limit is admitted, and the limit
// can be set. Once it commits, its job waits for its turn (Max 1).
func TestCallersTransactionHoldsNoLimit(t *testing.T) {
	t.Parallel()
	_, b := setup(t, limits.Limit{Name: "one", Kind: "limits_test_keyed", Max: 1})
	ctx := context.Background()
	require.NoError(t, b.rt.Start(ctx)) // declares the limits
	t.Cleanup(func() { _ = b.rt.Stop(context.Background()) })
	t.Cleanup(func() { close(b.worker.gate) })

	// Never admitted at insert (an admitter's pass holding the row for a
	// moment would send a job to pending as well: hence several tries).
	var tx pgx.Tx
	var inTx *rivertype.JobInsertResult
	for i := range 10 {
		var err error
		tx, err = b.db.Pool.Begin(ctx)
		require.NoError(t, err)
		inTx, err = b.rt.EnqueueTx(ctx, tx, keyedArgs{Customer: "c-1"}, nil)
		require.NoError(t, err)
		require.Equal(t, "pending", string(inTx.Job.State), "try %d: a job in the caller's transaction waits for the admitter", i)
		if i < 9 {
			require.NoError(t, tx.Rollback(ctx))
		}
	}
	defer func() { _ = tx.Rollback(ctx) }()

	// The transaction is open: the limit's row is free.
	setCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	require.NoError(t, limits.SetMax(setCtx, b.db.Pool, b.db.Schema, "one", 1), "setting the limit must not wait for the open transaction")
	other, err := b.rt.Enqueue(ctx, keyedArgs{Customer: "c-2"}, nil)
	require.NoError(t, err)
	pgtest.WaitFor(t, 10*time.Second, "the other job running while the transaction is open", func() (bool, error) {
		return gjson(t, b, other.Job.ID, `state::text`) == "running", nil
	})

	require.NoError(t, tx.Commit(ctx))
	// The admitter sees the committed job at its next pass; Max 1 is held.
	_, err = b.admitter.Pass(ctx, "one")
	require.NoError(t, err)
	require.Equal(t, "pending", gjson(t, b, inTx.Job.ID, `state::text`), "Max 1: the committed job waits for the running one")
}
