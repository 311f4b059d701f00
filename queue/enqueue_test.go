package queue_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/queue"
)

type countArgs struct {
	Key string `json:"key"`
}

func (countArgs) Kind() string { return "test.count" }

type countWorker struct {
	river.WorkerDefaults[countArgs]
	runs *atomic.Int64
}

func (w *countWorker) Work(ctx context.Context, job *river.Job[countArgs]) error {
	w.runs.Add(1)
	return nil
}

func TestEnqueueTx(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		db   *pgtest.DB
		runs *atomic.Int64
	}
	setup := func(t *testing.T) (*queue.Runtime, *testBundle) {
		t.Helper()
		db := pgtest.New(t)
		runs := &atomic.Int64{}
		rt := pgtest.StartRuntime(t, db, queue.RuntimeConfig{}, func(rt *queue.Runtime) {
			queue.AddWorker(rt, &countWorker{runs: runs})
		})
		return rt, &testBundle{db: db, runs: runs}
	}

	t.Run("RolledBackTransactionLeavesNoJob", func(t *testing.T) {
		t.Parallel()
		rt, bundle := setup(t)
		ctx := context.Background()

		tx, err := bundle.db.Pool.Begin(ctx)
		require.NoError(t, err)
		res, err := rt.EnqueueTx(ctx, tx, countArgs{Key: "rollback"}, nil)
		require.NoError(t, err)
		require.NoError(t, tx.Rollback(ctx))

		// A committed marker job inserted afterwards runs; once it has, the
		// rolled-back one would have been fetched too had it existed.
		marker, err := rt.Enqueue(ctx, countArgs{Key: "marker"}, nil)
		require.NoError(t, err)
		bundle.db.WaitForJobState(t, marker.Job.ID, rivertype.JobStateCompleted, 10*time.Second)

		state, err := bundle.db.JobState(ctx, res.Job.ID)
		require.NoError(t, err)
		require.Empty(t, state, "a job inserted in a rolled-back transaction must not exist")
		require.Equal(t, int64(1), bundle.runs.Load())
	})

	t.Run("CommittedTransactionRunsOnce", func(t *testing.T) {
		t.Parallel()
		rt, bundle := setup(t)
		ctx := context.Background()

		var id int64
		err := pgx.BeginFunc(ctx, bundle.db.Pool, func(tx pgx.Tx) error {
			res, err := rt.EnqueueTx(ctx, tx, countArgs{Key: "commit"}, nil)
			if err == nil {
				id = res.Job.ID
			}
			return err
		})
		require.NoError(t, err)
		bundle.db.WaitForJobState(t, id, rivertype.JobStateCompleted, 10*time.Second)

		var attempts int
		require.NoError(t, bundle.db.Pool.QueryRow(ctx, bundle.db.Q("SELECT attempt FROM /*schema*/river_job WHERE id = $1"), id).Scan(&attempts))
		require.Equal(t, 1, attempts)
		require.Equal(t, int64(1), bundle.runs.Load())
	})

	t.Run("EnqueueManyAndOptions", func(t *testing.T) {
		t.Parallel()
		rt, bundle := setup(t)
		ctx := context.Background()

		n, err := rt.EnqueueMany(ctx, []queue.EnqueueItem{
			{Args: countArgs{Key: "a"}},
			{Args: countArgs{Key: "b"}, Opts: &queue.EnqueueOpts{Priority: 2, MaxAttempts: 3}},
			{Args: countArgs{Key: "c"}, Opts: &queue.EnqueueOpts{ScheduledAt: time.Now().Add(time.Hour)}},
		})
		require.NoError(t, err)
		require.Equal(t, 3, n)
		pgtest.WaitFor(t, 10*time.Second, "two jobs completed", func() (bool, error) {
			return bundle.db.CountJobs(t, rivertype.JobStateCompleted) == 2, nil
		})
		require.Equal(t, 1, bundle.db.CountJobs(t, rivertype.JobStateScheduled))

		first, err := rt.Enqueue(ctx, countArgs{Key: "u"}, &queue.EnqueueOpts{Unique: true, ScheduledAt: time.Now().Add(time.Hour)})
		require.NoError(t, err)
		second, err := rt.Enqueue(ctx, countArgs{Key: "u"}, &queue.EnqueueOpts{Unique: true, ScheduledAt: time.Now().Add(time.Hour)})
		require.NoError(t, err)
		require.True(t, second.UniqueSkippedAsDuplicate)
		require.Equal(t, first.Job.ID, second.Job.ID)

		_, err = rt.Enqueue(ctx, countArgs{Key: "p"}, &queue.EnqueueOpts{Priority: 7})
		require.ErrorIs(t, err, queue.ErrInvalidPriority)
		require.ErrorContains(t, err, "7")
	})
}

// Arguments that are valid JSON but that River's jsonb column refuses, and
// kinds its table refuses, must fail before the insert: an insert error
// aborts the caller's transaction and names nothing.
func TestEnqueueNotStorable(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	c, err := queue.NewClient(db.Pool, queue.ClientConfig{Schema: db.Schema})
	require.NoError(t, err)
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		args    river.JobArgs
		mention string
	}{
		{"TypedNUL", countArgs{Key: "a\x00"}, `\u0000`},
		{"RawNUL", queue.RawArgs{KindName: "test.raw", JSON: []byte(`{"k":"\u0000"}`)}, `\u0000`},
		{"RawLoneSurrogate", queue.RawArgs{KindName: "test.raw", JSON: []byte(`{"k":"\udc00"}`)}, "surrogate"},
		{"RawInvalidUTF8", queue.RawArgs{KindName: "test.raw", JSON: []byte("{\"k\":\"\xff\"}")}, "UTF-8"},
		{"EmptyKind", queue.RawArgs{KindName: "", JSON: []byte(`{}`)}, `job kind ""`},
	} {
		tx, err := db.Pool.Begin(ctx)
		require.NoError(t, err)
		_, err = c.EnqueueTx(ctx, tx, tc.args, nil)
		var argsErr *queue.ArgsError
		require.ErrorAs(t, err, &argsErr, tc.name)
		require.Equal(t, tc.args.Kind(), argsErr.Kind)
		if tc.name != "EmptyKind" {
			require.ErrorIs(t, err, queue.ErrNotStorable, tc.name)
		}
		require.ErrorContains(t, err, tc.args.Kind(), tc.name)
		require.ErrorContains(t, err, tc.mention, tc.name)
		_, err = c.EnqueueManyTx(ctx, tx, []queue.EnqueueItem{{Args: countArgs{Key: "fine"}}, {Args: tc.args}})
		require.ErrorContains(t, err, "job 1", tc.name)
		require.ErrorContains(t, err, tc.mention, tc.name)
		_, err = tx.Exec(ctx, "SELECT 1")
		require.NoError(t, err, "%s: the caller's transaction is still usable", tc.name)
		require.NoError(t, tx.Rollback(ctx))
		_, err = c.Enqueue(ctx, tc.args, nil)
		require.ErrorContains(t, err, tc.mention, tc.name)
	}
	require.Zero(t, db.CountJobs(t))
}
