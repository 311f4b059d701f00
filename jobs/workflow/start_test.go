package workflow_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/jobs/workflow"
	"github.com/tributary-run/tributary/queue"
	"github.com/tributary-run/tributary/scheduler"
)

// halfArgs is the scheduled workflow's task: it runs 2.5 s and then to the
// next half second, so it ends half-way between two fires of an
// every-second schedule and each fire finds a settled state (a run started
// by a fire ends 2.5 s after it; one admitted when another ended, 3 s
// after).
type halfArgs struct{}

func (halfArgs) Kind() string { return "wftest.half" }

type halfWorker struct {
	river.WorkerDefaults[halfArgs]
}

func (halfWorker) Work(ctx context.Context, job *river.Job[halfArgs]) error {
	end := time.Now().Add(2500 * time.Millisecond).Truncate(time.Second).Add(500 * time.Millisecond)
	select {
	case <-time.After(time.Until(end)):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// TestScheduledStartOverlap fires four schedules every second for 10 s,
// each starting a workflow whose task takes 2.5 s, under each overlap
// policy, and counts what started, what was skipped and what was
// cancelled.
func TestScheduledStartOverlap(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	reg := workflow.NewRegistry()
	require.NoError(t, reg.Register("half", func(wf *workflow.Workflow, _ json.RawMessage) error {
		wf.Add("half", halfArgs{}, nil)
		return nil
	}))
	coord, err := workflow.NewCoordinator(db.Pool, workflow.CoordinatorConfig{Schema: db.Schema, Logger: pgtest.Logger(t)})
	require.NoError(t, err)
	policies := []workflow.Overlap{workflow.OverlapAllow, workflow.OverlapSkip, workflow.OverlapBufferOne, workflow.OverlapCancelPrevious}
	rt := pgtest.StartRuntime(t, db, queue.RuntimeConfig{
		Middleware: []rivertype.Middleware{coord.Middleware()}, Queues: map[string]int{"default": 40},
		FetchCooldown: time.Millisecond,
	}, func(rt *queue.Runtime) {
		queue.AddWorker(rt, halfWorker{})
		workflow.AddStartWorker(rt, reg)
		require.NoError(t, coord.Register(rt))
		s := scheduler.New(rt.Client, scheduler.Config{})
		for _, p := range policies {
			require.NoError(t, s.Add(scheduler.Schedule{Name: "every-second-" + string(p), Spec: "* * * * * *",
				Args: workflow.StartArgs{Workflow: "half", Overlap: p}}))
		}
		require.NoError(t, rt.AddService(s))
	})
	client := workflow.NewClient(rt.Client)

	fires := func(name string) (int, error) {
		var n int
		err := db.Pool.QueryRow(ctx, db.Q(`SELECT count(*) FROM /*schema*/river_job WHERE kind = 'tributary.workflow.start' AND metadata ->> $1 = $2`),
			scheduler.MetaSchedule, name).Scan(&n)
		return n, err
	}
	// Ten fires each, then pause: the eleventh would come a second later.
	paused := map[string]bool{}
	pgtest.WaitFor(t, time.Minute, "ten fires of every schedule", func() (bool, error) {
		for _, p := range policies {
			name := "every-second-" + string(p)
			if paused[name] {
				continue
			}
			n, err := fires(name)
			if err != nil {
				return false, err
			}
			if n >= 10 {
				if err := scheduler.Pause(ctx, rt.Client, name); err != nil {
					return false, err
				}
				paused[name] = true
			}
		}
		return len(paused) == len(policies), nil
	})

	type counts struct{ Fires, Started, Skipped, Cancelled, Completed int }
	got := map[workflow.Overlap]counts{}
	for _, p := range policies {
		name := "every-second-" + string(p)
		n, err := fires(name)
		require.NoError(t, err)
		require.Equal(t, 10, n, "schedule %s fired exactly ten times", name)
		var ids []string
		pgtest.WaitFor(t, time.Minute, "the workflows of "+name+" to end", func() (bool, error) {
			res, err := client.List(ctx, workflow.ListParams{Attributes: map[string]string{workflow.AttrSchedule: name}, Limit: 100})
			if err != nil {
				return false, err
			}
			ids = ids[:0]
			for _, s := range res.Workflows {
				if s.Status == workflow.StatusRunning {
					return false, nil
				}
				ids = append(ids, s.ID)
			}
			return true, nil
		})
		var c counts
		c.Fires, c.Started = n, len(ids)
		c.Skipped = n - len(ids)
		for _, id := range ids {
			s, err := client.Summary(ctx, id)
			require.NoError(t, err)
			switch s.Status {
			case workflow.StatusCancelled:
				c.Cancelled++
			case workflow.StatusCompleted:
				c.Completed++
			}
		}
		var skippedJobs int
		require.NoError(t, db.Pool.QueryRow(ctx, db.Q(`SELECT count(*) FROM /*schema*/river_job
            WHERE kind = 'tributary.workflow.start' AND metadata ->> $1 = $2 AND metadata -> 'output' ? 'skipped'`), scheduler.MetaSchedule, name).Scan(&skippedJobs))
		require.Equal(t, c.Skipped, skippedJobs, "%s: the start jobs' outputs say what they skipped", name)
		got[p] = c
		t.Logf("%-16s fires %2d  started %2d  skipped %2d  cancelled %2d  completed %2d", p, c.Fires, c.Started, c.Skipped, c.Cancelled, c.Completed)
	}
	require.Equal(t, map[workflow.Overlap]counts{
		workflow.OverlapAllow:          {Fires: 10, Started: 10, Skipped: 0, Cancelled: 0, Completed: 10},
		workflow.OverlapSkip:           {Fires: 10, Started: 4, Skipped: 6, Cancelled: 0, Completed: 4},  // fires 0, 3, 6, 9
		workflow.OverlapBufferOne:      {Fires: 10, Started: 5, Skipped: 5, Cancelled: 0, Completed: 5},  // fires 0, 1, 3, 6, 9
		workflow.OverlapCancelPrevious: {Fires: 10, Started: 10, Skipped: 0, Cancelled: 9, Completed: 1}, // each cancels the one before
	}, got, fmt.Sprint(got))
}

// TestScheduledStartBackfill backfills ten minutes of a schedule that
// starts a workflow every minute: ten runs, one per fire time; a second
// backfill of the range starts none.
func TestScheduledStartBackfill(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	reg := workflow.NewRegistry()
	require.NoError(t, reg.Register("quick", func(wf *workflow.Workflow, _ json.RawMessage) error {
		wf.Add("a", stepArgs{Name: "a"}, nil)
		return nil
	}))
	coord, err := workflow.NewCoordinator(db.Pool, workflow.CoordinatorConfig{Schema: db.Schema, Logger: pgtest.Logger(t)})
	require.NoError(t, err)
	rt := pgtest.StartRuntime(t, db, queue.RuntimeConfig{Middleware: []rivertype.Middleware{coord.Middleware()}}, func(rt *queue.Runtime) {
		queue.AddWorker(rt, newStepWorker())
		workflow.AddStartWorker(rt, reg)
		require.NoError(t, coord.Register(rt))
		s := scheduler.New(rt.Client, scheduler.Config{})
		require.NoError(t, s.Add(scheduler.Schedule{Name: "minutely", Spec: "*/1 * * * *",
			Args: workflow.StartArgs{Workflow: "quick", Overlap: workflow.OverlapSkip}}))
		require.NoError(t, rt.AddService(s))
	})
	client := workflow.NewClient(rt.Client)
	from := time.Now().UTC().Add(-3 * time.Hour).Truncate(time.Hour)
	to := from.Add(10 * time.Minute)
	pgtest.WaitFor(t, 30*time.Second, "the scheduler to declare the schedule", func() (bool, error) {
		infos, err := scheduler.List(ctx, rt.Client)
		return len(infos) == 1, err
	})

	res, err := scheduler.Backfill(ctx, rt.Client, "minutely", from, to)
	require.NoError(t, err)
	require.Equal(t, 10, res.Inserted)
	require.Zero(t, res.Existing)
	list := func() []workflow.Summary {
		var out []workflow.Summary
		pgtest.WaitFor(t, time.Minute, "the backfilled workflows to complete", func() (bool, error) {
			l, err := client.List(ctx, workflow.ListParams{Attributes: map[string]string{workflow.AttrSchedule: "minutely"}, Limit: 100})
			if err != nil || len(l.Workflows) < 10 {
				return false, err
			}
			out = l.Workflows
			for _, s := range out {
				if s.Status != workflow.StatusCompleted {
					return false, nil
				}
			}
			return true, nil
		})
		return out
	}
	runs := list()
	require.Len(t, runs, 10, "one run per fire time, whatever the overlap policy")
	var fireTimes []string
	for _, s := range runs {
		d, err := client.Get(ctx, s.ID)
		require.NoError(t, err)
		fireTimes = append(fireTimes, d.Attributes[workflow.AttrFireAt])
	}
	var want []string
	for i := range 10 {
		want = append(want, from.Add(time.Duration(i)*time.Minute).Format(time.RFC3339Nano))
	}
	require.ElementsMatch(t, want, fireTimes)

	again, err := scheduler.Backfill(ctx, rt.Client, "minutely", from, to)
	require.NoError(t, err)
	require.Zero(t, again.Inserted, "a second backfill starts nothing")
	require.Equal(t, 10, again.Existing)
	require.Len(t, list(), 10)

	_, err = scheduler.Backfill(ctx, rt.Client, "minutely", from, from.Add(time.Duration(scheduler.BackfillMax+1)*time.Minute))
	require.ErrorIs(t, err, scheduler.ErrBackfillTooLong)
}
