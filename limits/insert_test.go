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

	tx, err := b.db.Pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	res, err := b.rt.EnqueueTx(ctx, tx, keyedArgs{Customer: "c-3"}, nil)
	require.NoError(t, err)
	require.Equal(t, "pending", string(res.Job.State), "a REPEATABLE READ snapshot cannot count what others admit")
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

// TestOpenInsertHoldsOnlyItsLimit: a transaction that admitted a job at
// insert holds its limit's row until it ends; the admitter admits the jobs
// of other limits meanwhile, and the held limit's once it ends.
func TestOpenInsertHoldsOnlyItsLimit(t *testing.T) {
	t.Parallel()
	_, b := setup(t,
		limits.Limit{Name: "a-held", Kind: "limits_test_keyed", Max: 1},
		limits.Limit{Name: "b-free", Kind: "limits_test_other", Max: 1})
	ctx := context.Background()
	require.NoError(t, b.rt.Start(ctx)) // declares the limits
	t.Cleanup(func() { _ = b.rt.Stop(context.Background()) })
	t.Cleanup(func() { close(b.worker.gate) })

	// Admitted at insert unless the admitter's poll held the row just then.
	var tx pgx.Tx
	var held *rivertype.JobInsertResult
	pgtest.WaitFor(t, 10*time.Second, "a job of a-held admitted at insert", func() (bool, error) {
		var err error
		if tx, err = b.db.Pool.Begin(ctx); err != nil {
			return false, err
		}
		if held, err = b.rt.EnqueueTx(ctx, tx, keyedArgs{Customer: "c-1"}, nil); err != nil || held.Job.State == rivertype.JobStateAvailable {
			return err == nil, err
		}
		return false, tx.Rollback(ctx)
	})
	defer func() { _ = tx.Rollback(ctx) }()

	// b-free's job waits for the admitter: inserted while b-free admits
	// nothing, then b-free is reset.
	require.NoError(t, limits.SetMax(ctx, b.db.Pool, b.db.Schema, "b-free", 0))
	other, err := b.rt.Enqueue(ctx, queue.RawArgs{KindName: "limits_test_other", JSON: []byte(`{}`)}, nil)
	require.NoError(t, err)
	require.Equal(t, "pending", string(other.Job.State))
	require.NoError(t, limits.ResetMax(ctx, b.db.Pool, b.db.Schema, "b-free"))
	pgtest.WaitFor(t, 10*time.Second, "b-free's job admitted while a-held's row is held", func() (bool, error) {
		return gjson(t, b, other.Job.ID, `state::text`) != "pending", nil
	})

	// a-held's second job waits while the transaction is open, and is
	// admitted once the first job's slot is given back after the commit.
	waiting, err := b.rt.Enqueue(ctx, keyedArgs{Customer: "c-2"}, nil)
	require.NoError(t, err)
	require.Equal(t, "pending", string(waiting.Job.State), "the row is held: the job waits for the admitter")
	require.NoError(t, tx.Commit(ctx))
	pgtest.WaitFor(t, 10*time.Second, "the first job running", func() (bool, error) {
		return gjson(t, b, held.Job.ID, `state::text`) == "running", nil
	})
	require.Equal(t, "pending", gjson(t, b, waiting.Job.ID, `state::text`), "Max 1: the second waits for the first")
}
