package scheduler

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/internal/servicetest"
	"github.com/tributary-run/tributary/queue"
)

// noopArgs is a job kind for schedules under test.
type noopArgs struct {
	N int `json:"n"`
}

func (noopArgs) Kind() string { return "schedtest.noop" }

type noopWorker struct{ river.WorkerDefaults[noopArgs] }

func (noopWorker) Work(context.Context, *river.Job[noopArgs]) error { return nil }

// fakeClock is a settable clock for NowFunc.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock(t time.Time) *fakeClock { return &fakeClock{t: t} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

// firedJob is a job a schedule inserted, read back from river_job.
type firedJob struct {
	ID      int64
	FireAt  time.Time
	State   string
	FiredBy string
	Missed  *int64
}

// firedJobs returns the jobs of schedule by fire time.
func firedJobs(t testing.TB, db *pgtest.DB, schedule string) []firedJob {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), db.Q(`
SELECT id, metadata->>'tributary_fire_at', state::text, coalesce(metadata->>'tributary_fired_by', ''),
       (metadata->>'tributary_missed')::bigint
FROM /*schema*/river_job WHERE metadata->>'tributary_schedule' = $1
ORDER BY metadata->>'tributary_fire_at', id`), schedule)
	require.NoError(t, err)
	defer rows.Close()
	var out []firedJob
	for rows.Next() {
		var j firedJob
		var at string
		require.NoError(t, rows.Scan(&j.ID, &at, &j.State, &j.FiredBy, &j.Missed))
		j.FireAt, err = time.Parse(time.RFC3339Nano, at)
		require.NoError(t, err)
		out = append(out, j)
	}
	require.NoError(t, rows.Err())
	return out
}

func fireTimes(jobs []firedJob) []time.Time {
	out := make([]time.Time, len(jobs))
	for i, j := range jobs {
		out[i] = j.FireAt
	}
	return out
}

// scheduleRow reads a schedule's stored state.
func scheduleRow(t testing.TB, db *pgtest.DB, name string) (next time.Time, fired, skipped int64, outcome string) {
	t.Helper()
	var oc *string
	err := db.Pool.QueryRow(context.Background(), db.Q(`
SELECT next_run_at, fired_count, skipped_count, last_outcome FROM /*schema*/tributary_schedule WHERE name = $1`), name).
		Scan(&next, &fired, &skipped, &oc)
	require.NoError(t, err)
	if oc != nil {
		outcome = *oc
	}
	return next.UTC(), fired, skipped, outcome
}

func TestServiceContract(t *testing.T) {
	t.Parallel()
	servicetest.Run(t, "scheduler.Scheduler", func(t *testing.T) (queue.Service, error) {
		s := New(pgtest.New(t).Client(t), Config{Logger: pgtest.Logger(t)})
		return s, s.Add(Schedule{Name: "contract", Spec: "@every 1h", Args: noopArgs{}})
	})
}
