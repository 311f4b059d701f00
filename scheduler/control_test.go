package scheduler

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/queue"
)

func TestDeclareAndControl(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		db     *pgtest.DB
		client *queue.Client
		clock  *fakeClock
	}
	t0 := time.Date(2030, 1, 1, 0, 0, 30, 0, time.UTC)
	setup := func(t *testing.T) testBundle {
		t.Helper()
		db := pgtest.New(t)
		return testBundle{db: db, client: db.Client(t), clock: newFakeClock(t0)}
	}
	// declare starts and stops a scheduler with schedules: one deploy.
	declare := func(t *testing.T, b testBundle, schedules ...Schedule) *Scheduler {
		t.Helper()
		s := New(b.client, Config{NowFunc: b.clock.Now, Logger: pgtest.Logger(t)})
		require.NoError(t, s.Add(schedules...))
		require.NoError(t, s.declare(context.Background()))
		return s
	}
	report := Schedule{Name: "report", Spec: "0 * * * *", Args: noopArgs{N: 1}}
	digest := Schedule{Name: "digest", Spec: "30 6 * * *", Timezone: "Europe/Berlin", Args: noopArgs{N: 2}}

	t.Run("schedules no longer declared are orphaned and not fired", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		declare(t, b, report, digest)
		s := declare(t, b, report)
		require.EqualValues(t, 1, s.Stats().Orphaned)

		all, err := List(context.Background(), b.client)
		require.NoError(t, err)
		require.Len(t, all, 2)
		require.Equal(t, "digest", all[0].Name)
		require.True(t, all[0].Orphaned)
		require.Equal(t, "Europe/Berlin", all[0].Timezone)
		require.Equal(t, time.Date(2030, 1, 1, 5, 30, 0, 0, time.UTC), all[0].NextRunAt.UTC(), "06:30 in Berlin is 05:30 UTC in winter")
		require.False(t, all[1].Orphaned)

		b.clock.Set(t0.Add(48 * time.Hour))
		require.NoError(t, s.fireDue(context.Background()))
		require.Len(t, firedJobs(t, b.db, "report"), 1)
		require.Empty(t, firedJobs(t, b.db, "digest"), "an orphaned schedule does not fire")

		_, err = Trigger(context.Background(), b.client, "digest", TriggerOpts{})
		require.ErrorIs(t, err, ErrOrphaned)

		// A process that declares nothing orphans everything.
		empty := New(b.client, Config{NowFunc: b.clock.Now, Logger: pgtest.Logger(t)})
		require.NoError(t, empty.declare(context.Background()))
		require.EqualValues(t, 2, empty.Stats().Orphaned)

		// Declaring it again adopts it.
		declare(t, b, report, digest)
		all, err = List(context.Background(), b.client)
		require.NoError(t, err)
		require.False(t, all[0].Orphaned)
		require.False(t, all[1].Orphaned)
	})

	t.Run("a changed spec starts a new timetable; an unchanged one keeps its next run", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		declare(t, b, report)
		next, _, _, _ := scheduleRow(t, b.db, "report")
		require.Equal(t, time.Date(2030, 1, 1, 1, 0, 0, 0, time.UTC), next)

		b.clock.Set(t0.Add(10 * time.Minute))
		declare(t, b, report)
		next, _, _, _ = scheduleRow(t, b.db, "report")
		require.Equal(t, time.Date(2030, 1, 1, 1, 0, 0, 0, time.UTC), next, "redeclaring does not move it")

		changed := report
		changed.Spec = "*/15 * * * *"
		declare(t, b, changed)
		next, _, _, _ = scheduleRow(t, b.db, "report")
		require.Equal(t, time.Date(2030, 1, 1, 0, 15, 0, 0, time.UTC), next)
	})

	t.Run("trigger inserts the stored job now and leaves the next run", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		declare(t, b, report)
		before, _, _, _ := scheduleRow(t, b.db, "report")
		id, err := Trigger(context.Background(), b.client, "report", TriggerOpts{FiredBy: "test"})
		require.NoError(t, err)
		jobs := firedJobs(t, b.db, "report")
		require.Len(t, jobs, 1)
		require.Equal(t, id, jobs[0].ID)
		require.Equal(t, "test", jobs[0].FiredBy)
		var args string
		require.NoError(t, b.db.Pool.QueryRow(context.Background(), b.db.Q(`SELECT args::text FROM /*schema*/river_job WHERE id = $1`), id).Scan(&args))
		require.JSONEq(t, `{"n": 1}`, args)
		after, fired, _, outcome := scheduleRow(t, b.db, "report")
		require.Equal(t, before, after)
		require.EqualValues(t, 1, fired)
		require.Equal(t, "triggered", outcome)

		_, err = Trigger(context.Background(), b.client, "nope", TriggerOpts{})
		require.ErrorIs(t, err, ErrNotFound)
		require.ErrorContains(t, err, `"nope"`)
	})

	t.Run("trigger respects overlap skip unless forced", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		declare(t, b, Schedule{Name: "slow", Spec: "@hourly", Args: noopArgs{}, Overlap: OverlapSkip})
		_, err := Trigger(context.Background(), b.client, "slow", TriggerOpts{})
		require.NoError(t, err) // nobody works the job: it stays available
		_, err = Trigger(context.Background(), b.client, "slow", TriggerOpts{})
		require.ErrorIs(t, err, ErrPreviousRunning)
		_, err = Trigger(context.Background(), b.client, "slow", TriggerOpts{Force: true})
		require.NoError(t, err)
		require.Len(t, firedJobs(t, b.db, "slow"), 2)
	})

	t.Run("pause stops fires on every replica; resume skips the paused period", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		s := declare(t, b, report)
		require.NoError(t, Pause(context.Background(), b.client, "report"))
		b.clock.Set(t0.Add(3 * time.Hour))
		require.NoError(t, s.fireDue(context.Background()))
		require.Empty(t, firedJobs(t, b.db, "report"))

		// Resume works from real time, so check it against real time.
		require.NoError(t, Resume(context.Background(), b.client, "report"))
		next, _, _, _ := scheduleRow(t, b.db, "report")
		require.True(t, next.After(time.Now()), "next run %s is after now", next)
		require.LessOrEqual(t, time.Until(next), time.Hour)

		require.ErrorIs(t, Pause(context.Background(), b.client, "nope"), ErrNotFound)
		require.ErrorIs(t, Resume(context.Background(), b.client, "nope"), ErrNotFound)
	})

	t.Run("the unique index refuses a second job for one fire time", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		declare(t, b, report)
		ctx := context.Background()
		insert := func() error {
			tx, err := b.client.Pool().Begin(ctx)
			require.NoError(t, err)
			defer tx.Rollback(ctx) //nolint:errcheck
			meta := `{"tributary_schedule": "report", "tributary_fire_at": "2030-01-01T01:00:00Z"}`
			if _, err := tx.Exec(ctx, b.db.Q(`
INSERT INTO /*schema*/river_job (args, kind, max_attempts, metadata, priority, queue, state, scheduled_at)
VALUES ('{}', 'schedtest.noop', 1, $1, 1, 'default', 'available', now())`), meta); err != nil {
				return err
			}
			return tx.Commit(ctx)
		}
		require.NoError(t, insert())
		require.ErrorContains(t, insert(), "river_job_tributary_schedule_fire")

		// And a fire of that time finds the job instead of inserting one.
		b.clock.Set(time.Date(2030, 1, 1, 1, 0, 5, 0, time.UTC))
		s := declare(t, b, report)
		require.NoError(t, s.fireDue(ctx))
		require.Len(t, firedJobs(t, b.db, "report"), 1)
		require.EqualValues(t, 1, s.Stats().Duplicates)
		_, _, _, outcome := scheduleRow(t, b.db, "report")
		require.Equal(t, "duplicate", outcome)
	})
}

func TestDueFiresLargeBacklog(t *testing.T) {
	t.Parallel()

	spec, err := ParseSpec("* * * * * *", "") // every second
	require.NoError(t, err)
	from := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	now := from.Add(3*time.Hour + 500*time.Millisecond) // 10,801 fire times
	count, exact, last, next := spec.dueFires(from, now, 3)
	require.False(t, exact)
	require.GreaterOrEqual(t, count, int64(scanLimit))
	require.Equal(t, []time.Time{from.Add(3*time.Hour - 2*time.Second), from.Add(3*time.Hour - time.Second), from.Add(3 * time.Hour)}, last)
	require.Equal(t, from.Add(3*time.Hour+time.Second), next)

	count, exact, last, next = spec.dueFires(from, from.Add(10*time.Second), 2)
	require.True(t, exact)
	require.EqualValues(t, 11, count)
	require.Equal(t, []time.Time{from.Add(9 * time.Second), from.Add(10 * time.Second)}, last)
	require.Equal(t, from.Add(11*time.Second), next)
}
