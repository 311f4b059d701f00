package scheduler

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/queue"
)

// slowArgs is a job that runs longer than its schedule's period.
type slowArgs struct {
	MS int `json:"ms"`
}

func (slowArgs) Kind() string { return "schedtest.slow" }

// slowWorker sleeps and records how many of its jobs ran at once.
type slowWorker struct {
	river.WorkerDefaults[slowArgs]
	inFlight, maxInFlight, done atomic.Int64
}

func (w *slowWorker) Work(ctx context.Context, job *river.Job[slowArgs]) error {
	n := w.inFlight.Add(1)
	defer w.inFlight.Add(-1)
	for {
		m := w.maxInFlight.Load()
		if n <= m || w.maxInFlight.CompareAndSwap(m, n) {
			break
		}
	}
	timer := time.NewTimer(time.Duration(job.Args.MS) * time.Millisecond)
	defer timer.Stop()
	select {
	case <-timer.C:
		w.done.Add(1)
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func TestOverlap(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		db     *pgtest.DB
		worker *slowWorker
	}
	// setup runs two replicas (runtime + scheduler each) of an @every 1s
	// schedule whose job takes 2.5 s.
	setup := func(t *testing.T, overlap Overlap) testBundle {
		t.Helper()
		db := pgtest.New(t)
		w := &slowWorker{}
		for range 2 {
			pgtest.StartRuntime(t, db, queue.RuntimeConfig{Queues: map[string]int{"default": 5}}, func(rt *queue.Runtime) {
				queue.AddWorker(rt, w)
				s := New(rt.Client, Config{})
				require.NoError(t, s.Add(Schedule{Name: "slow", Spec: "@every 1s", Args: slowArgs{MS: 2500}, Overlap: overlap}))
				require.NoError(t, rt.AddService(s))
			})
		}
		return testBundle{db: db, worker: w}
	}

	t.Run("skip never runs two jobs at once", func(t *testing.T) {
		t.Parallel()
		b := setup(t, OverlapSkip)
		pgtest.WaitFor(t, 30*time.Second, "three slow jobs done", func() (bool, error) { return b.worker.done.Load() >= 3, nil })

		require.EqualValues(t, 1, b.worker.maxInFlight.Load(), "two jobs of the schedule ran at once")
		_, _, skipped, _ := scheduleRow(t, b.db, "slow")
		require.Positive(t, skipped, "fires during a running job are skipped")

		// The database agrees: each job started after the previous finished.
		rows, err := b.db.Pool.Query(context.Background(), b.db.Q(`
SELECT attempted_at, finalized_at FROM /*schema*/river_job
WHERE metadata->>'tributary_schedule' = 'slow' AND attempted_at IS NOT NULL ORDER BY attempted_at`))
		require.NoError(t, err)
		var prevEnd *time.Time
		n := 0
		for rows.Next() {
			var start time.Time
			var end *time.Time
			require.NoError(t, rows.Scan(&start, &end))
			if prevEnd != nil {
				require.False(t, start.Before(*prevEnd), "job started at %s before the previous one finished at %s", start, *prevEnd)
			}
			prevEnd = end
			n++
		}
		require.NoError(t, rows.Err())
		require.GreaterOrEqual(t, n, 3)
	})

	t.Run("allow lets them overlap", func(t *testing.T) {
		t.Parallel()
		b := setup(t, OverlapAllow)
		pgtest.WaitFor(t, 30*time.Second, "two jobs running at once", func() (bool, error) { return b.worker.maxInFlight.Load() >= 2, nil })
	})
}
