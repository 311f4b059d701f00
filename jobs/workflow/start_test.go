package workflow_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
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
		var runs []*workflow.Summary
		for _, id := range ids {
			s, err := client.Summary(ctx, id)
			require.NoError(t, err)
			runs = append(runs, s)
			switch s.Status {
			case workflow.StatusCancelled:
				c.Cancelled++
			case workflow.StatusCompleted:
				c.Completed++
			}
		}
		if p == workflow.OverlapSkip || p == workflow.OverlapBufferOne {
			requireOneAtATime(t, p, runs)
		}
		var skippedJobs int
		require.NoError(t, db.Pool.QueryRow(ctx, db.Q(`SELECT count(*) FROM /*schema*/river_job
            WHERE kind = 'tributary.workflow.start' AND metadata ->> $1 = $2 AND metadata -> 'output' ? 'skipped'`), scheduler.MetaSchedule, name).Scan(&skippedJobs))
		require.Equal(t, c.Skipped, skippedJobs, "%s: the start jobs' outputs say what they skipped", name)
		got[p] = c
		t.Logf("%-16s fires %2d  started %2d  skipped %2d  cancelled %2d  completed %2d", p, c.Fires, c.Started, c.Skipped, c.Cancelled, c.Completed)
	}
	// Allow and cancel previous do not depend on when a run ends. Skip and
	// buffer one do: a run ends at X.5 s, and on a quiet machine its end is
	// recorded before the fire at X+1 s, so skip starts at fires 0, 3, 6
	// and 9, and buffer one at 0, 1, 3, 6 and 9. On a loaded machine an end
	// recorded after the next fire turns that fire into a skip, so for them
	// the test checks the policy (requireOneAtATime) and bounds the counts.
	require.Equal(t, counts{Fires: 10, Started: 10, Skipped: 0, Cancelled: 0, Completed: 10}, got[workflow.OverlapAllow], fmt.Sprint(got))
	require.Equal(t, counts{Fires: 10, Started: 10, Skipped: 0, Cancelled: 9, Completed: 1}, got[workflow.OverlapCancelPrevious], fmt.Sprint(got))
	for p, most := range map[workflow.Overlap]int{workflow.OverlapSkip: 4, workflow.OverlapBufferOne: 5} {
		c := got[p]
		require.Equal(t, 10, c.Fires, "%s: %v", p, c)
		require.Equal(t, 0, c.Cancelled, "%s: %v", p, c)
		require.Equal(t, c.Started, c.Completed, "%s: %v", p, c)
		require.GreaterOrEqual(t, c.Started, 2, "%s: %v", p, c)
		require.LessOrEqual(t, c.Started, most, "%s: %v", p, c)
	}
}

// requireOneAtATime checks that the runs of a skip or buffer-one schedule
// ran one after another: each run's task takes 2.5 s, so a run that began
// before the one ahead of it ended would end less than 2.5 s after it. A
// skip run is created only once the one ahead has ended; a buffer-one run
// may be created (queued) while one runs, but never while another waits,
// so it is created no earlier than the end of the run two ahead.
func requireOneAtATime(t *testing.T, p workflow.Overlap, runs []*workflow.Summary) {
	t.Helper()
	slices.SortFunc(runs, func(a, b *workflow.Summary) int { return a.CreatedAt.Compare(b.CreatedAt) })
	for i, r := range runs {
		require.NotNil(t, r.FinishedAt, "%s: run %s", p, r.ID)
		if i == 0 {
			continue
		}
		prev := runs[i-1]
		require.GreaterOrEqual(t, r.FinishedAt.Sub(*prev.FinishedAt), 2500*time.Millisecond,
			"%s: run %s ended %s after run %s: they overlapped", p, r.ID, r.FinishedAt.Sub(*prev.FinishedAt), prev.ID)
		ahead := prev
		if p == workflow.OverlapBufferOne {
			if i < 2 {
				continue
			}
			ahead = runs[i-2]
		}
		// Both times are process clocks read before their transactions
		// commit, so a start that saw the end committed may read its clock
		// a little earlier; an overlap would be far earlier (a fire at X s
		// against an end at X.5 s or later).
		require.False(t, r.CreatedAt.Before(ahead.FinishedAt.Add(-250*time.Millisecond)), "%s: run %s created at %s, before run %s ended at %s",
			p, r.ID, r.CreatedAt, ahead.ID, *ahead.FinishedAt)
	}
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
