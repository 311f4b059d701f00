package scheduler

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/queue"
)

// TestCatchUpAfterDowntime stops every scheduler for five periods of a
// one-minute schedule (on a fake clock), starts a new one, and checks that
// each catch-up policy does what it says.
func TestCatchUpAfterDowntime(t *testing.T) {
	t.Parallel()

	t0 := time.Date(2030, 1, 1, 0, 0, 30, 0, time.UTC)
	minute := func(m int) time.Time { return time.Date(2030, 1, 1, 0, m, 0, 0, time.UTC) }

	type testBundle struct {
		db     *pgtest.DB
		client *queue.Client
		clock  *fakeClock
	}
	setup := func(t *testing.T) testBundle {
		t.Helper()
		db := pgtest.New(t)
		return testBundle{db: db, client: db.Client(t), clock: newFakeClock(t0)}
	}

	// run starts a scheduler with sc, lets it fire what is due at the
	// clock's time, waits until next_run_at moved to wantNext, and stops it:
	// one replica's lifetime.
	run := func(t *testing.T, b testBundle, sc Schedule, cfg Config, wantNext time.Time) {
		t.Helper()
		cfg.NowFunc = b.clock.Now
		cfg.Logger = pgtest.Logger(t)
		s := New(b.client, cfg)
		require.NoError(t, s.Add(sc))
		ctx := context.Background()
		require.NoError(t, s.Start(ctx))
		s.Wake()
		pgtest.WaitFor(t, 10*time.Second, "next_run_at to become "+wantNext.String(), func() (bool, error) {
			var next time.Time
			err := b.db.Pool.QueryRow(ctx, b.db.Q(`SELECT next_run_at FROM /*schema*/tributary_schedule WHERE name = $1`), sc.Name).Scan(&next)
			return err == nil && next.Equal(wantNext), err
		})
		stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		require.NoError(t, s.Stop(stopCtx))
	}

	// scenario: a replica fires 00:01, everything stops, the clock moves to
	// restartAt (fire times 00:02 to 00:06 missed), a new replica starts.
	scenario := func(t *testing.T, sc Schedule, cfg Config, restartAt time.Time) (testBundle, []firedJob) {
		t.Helper()
		b := setup(t)
		run(t, b, sc, cfg, minute(1)) // declares; nothing due yet
		b.clock.Set(minute(1).Add(time.Second))
		run(t, b, sc, cfg, minute(2))
		require.Equal(t, []time.Time{minute(1)}, fireTimes(firedJobs(t, b.db, sc.Name)))

		b.clock.Set(restartAt)
		run(t, b, sc, cfg, minute(7))
		return b, firedJobs(t, b.db, sc.Name)
	}

	t.Run("once inserts one job for all missed fires", func(t *testing.T) {
		t.Parallel()
		b, jobs := scenario(t, Schedule{Name: "s", Spec: "* * * * *", Args: noopArgs{}, CatchUp: CatchUpOnce}, Config{}, minute(6).Add(10*time.Second))
		require.Equal(t, []time.Time{minute(1), minute(6)}, fireTimes(jobs))
		require.NotNil(t, jobs[1].Missed)
		require.EqualValues(t, 4, *jobs[1].Missed, "the one job stands for 00:02 to 00:06")
		_, fired, skipped, outcome := scheduleRow(t, b.db, "s")
		require.EqualValues(t, 2, fired)
		require.EqualValues(t, 0, skipped)
		require.Equal(t, "inserted", outcome)
	})

	t.Run("once is the default", func(t *testing.T) {
		t.Parallel()
		_, jobs := scenario(t, Schedule{Name: "s", Spec: "* * * * *", Args: noopArgs{}}, Config{}, minute(6).Add(50*time.Second))
		require.Equal(t, []time.Time{minute(1), minute(6)}, fireTimes(jobs))
	})

	t.Run("each inserts every missed fire", func(t *testing.T) {
		t.Parallel()
		_, jobs := scenario(t, Schedule{Name: "s", Spec: "* * * * *", Args: noopArgs{}, CatchUp: CatchUpEach}, Config{}, minute(6).Add(10*time.Second))
		require.Equal(t, []time.Time{minute(1), minute(2), minute(3), minute(4), minute(5), minute(6)}, fireTimes(jobs))
	})

	t.Run("each stops at its bound, keeping the newest", func(t *testing.T) {
		t.Parallel()
		b, jobs := scenario(t, Schedule{Name: "s", Spec: "* * * * *", Args: noopArgs{}, CatchUp: CatchUpEach, CatchUpMax: 3}, Config{}, minute(6).Add(10*time.Second))
		require.Equal(t, []time.Time{minute(1), minute(4), minute(5), minute(6)}, fireTimes(jobs))
		_, fired, skipped, _ := scheduleRow(t, b.db, "s")
		require.EqualValues(t, 4, fired)
		require.EqualValues(t, 2, skipped, "00:02 and 00:03 dropped")
	})

	t.Run("each with @every", func(t *testing.T) {
		t.Parallel()
		// @every counts from the first declaration (00:00:30): fires at
		// 00:01:30, then 00:02:30 ... so shift the expectations.
		b := setup(t)
		sc := Schedule{Name: "s", Spec: "@every 1m", Args: noopArgs{}, CatchUp: CatchUpEach}
		at := func(m int) time.Time { return minute(m).Add(30 * time.Second) }
		run(t, b, sc, Config{}, at(1))
		b.clock.Set(at(1))
		run(t, b, sc, Config{}, at(2))
		b.clock.Set(at(6).Add(5 * time.Second))
		run(t, b, sc, Config{}, at(7))
		require.Equal(t, []time.Time{at(1), at(2), at(3), at(4), at(5), at(6)}, fireTimes(firedJobs(t, b.db, "s")))
	})

	t.Run("skip drops missed fires but keeps one that is on time", func(t *testing.T) {
		t.Parallel()
		b, jobs := scenario(t, Schedule{Name: "s", Spec: "* * * * *", Args: noopArgs{}, CatchUp: CatchUpSkip}, Config{MisfireGrace: 30 * time.Second}, minute(6).Add(10*time.Second))
		require.Equal(t, []time.Time{minute(1), minute(6)}, fireTimes(jobs), "00:06 is 10 s late, within the 30 s grace")
		_, _, skipped, _ := scheduleRow(t, b.db, "s")
		require.EqualValues(t, 4, skipped)
	})

	t.Run("skip drops everything past the grace", func(t *testing.T) {
		t.Parallel()
		b, jobs := scenario(t, Schedule{Name: "s", Spec: "* * * * *", Args: noopArgs{}, CatchUp: CatchUpSkip}, Config{MisfireGrace: 30 * time.Second}, minute(6).Add(40*time.Second))
		require.Equal(t, []time.Time{minute(1)}, fireTimes(jobs))
		_, _, skipped, outcome := scheduleRow(t, b.db, "s")
		require.EqualValues(t, 5, skipped)
		require.Equal(t, "skipped_catch_up", outcome)
	})
}

// TestCatchUpRealClock stops the only runtime of an @every 1s schedule for
// about four periods of real time and restarts it: with catch-up each, the
// fire times stay a gapless one-second chain.
func TestCatchUpRealClock(t *testing.T) {
	t.Parallel()

	db := pgtest.New(t)
	sc := Schedule{Name: "tick", Spec: "@every 1s", Args: noopArgs{}, CatchUp: CatchUpEach, CatchUpMax: 100}
	start := func() *queue.Runtime {
		rt, err := queue.NewRuntime(db.Pool, queue.RuntimeConfig{Schema: db.Schema, Logger: pgtest.Logger(t), Queues: map[string]int{"default": 2}})
		require.NoError(t, err)
		queue.AddWorker(rt, &noopWorker{})
		s := New(rt.Client, Config{})
		require.NoError(t, s.Add(sc))
		require.NoError(t, rt.AddService(s))
		require.NoError(t, rt.Start(context.Background()))
		return rt
	}
	stop := func(rt *queue.Runtime) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		require.NoError(t, rt.Stop(ctx))
	}

	rt := start()
	pgtest.WaitFor(t, 10*time.Second, "two fires", func() (bool, error) { return len(firedJobs(t, db, "tick")) >= 2, nil })
	stop(rt)
	before := firedJobs(t, db, "tick")

	// Downtime: nothing runs for about four periods.
	downtime := time.NewTimer(4500 * time.Millisecond)
	<-downtime.C

	restarted := time.Now()
	rt = start()
	defer stop(rt)
	pgtest.WaitFor(t, 10*time.Second, "fires caught up", func() (bool, error) {
		jobs := firedJobs(t, db, "tick")
		return len(jobs) > 0 && !jobs[len(jobs)-1].FireAt.Before(restarted.Add(-time.Second)), nil
	})
	jobs := firedJobs(t, db, "tick")
	require.Greater(t, len(jobs), len(before)+3, "the downtime's fires were inserted")
	for i := 1; i < len(jobs); i++ {
		require.Equal(t, time.Second, jobs[i].FireAt.Sub(jobs[i-1].FireAt), "gap or duplicate between %s and %s", jobs[i-1].FireAt, jobs[i].FireAt)
	}
}
