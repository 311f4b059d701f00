package tributary

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/scheduler"
)

type mainArgs struct{ N int }

func (mainArgs) Kind() string { return "test.main" }

// lookupOf is the environment of a Main on db's schema.
func lookupOf(db *pgtest.DB, extra map[string]string) func() (Config, error) {
	env := map[string]string{"DATABASE_URL": db.URL, "TRIBUTARY_SCHEMA": db.Schema, "TRIBUTARY_SHUTDOWN_TIMEOUT": "5s"}
	for k, v := range extra {
		env[k] = v
	}
	return func() (Config, error) {
		return ConfigFromLookup(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	}
}

// TestMainRunsSetupThenWorks: Main's body opens the App from the
// environment, calls setup, and works what setup enqueued until its
// context ends, then returns nil.
func TestMainRunsSetupThenWorks(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	worked, started, got := make(chan int, 1), make(chan struct{}), make(chan int, 1)
	go func() {
		// Run's end, once the job ran and every service started (the
		// probe starts last).
		<-started
		got <- <-worked
		cancel()
	}()
	err := run(ctx, lookupOf(db, nil), func(ctx context.Context, app *App) error {
		require.Equal(t, db.Schema, app.Config().Schema)
		AddWorker(app, river.WorkFunc(func(_ context.Context, job *river.Job[mainArgs]) error {
			worked <- job.Args.N
			return nil
		}))
		if err := app.Runtime().AddService(startProbe(started)); err != nil {
			return err
		}
		_, err := app.Enqueue(ctx, mainArgs{N: 42}, nil)
		return err
	})
	require.NoError(t, err)
	require.ErrorIs(t, ctx.Err(), context.Canceled, "Run returned at the test's cancel, not at its deadline")
	require.Equal(t, 42, <-got, "the job setup enqueued ran")
}

// startProbe is a service that closes its channel when it starts.
type startProbe chan struct{}

func (startProbe) Name() string                  { return "start probe" }
func (p startProbe) Start(context.Context) error { close(p); return nil }
func (startProbe) Stop(context.Context) error    { return nil }

// TestMainSetupError: an error from setup is Main's error, named as
// setup's, and the App's pool is closed.
func TestMainSetupError(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	var opened *App
	boom := errors.New("boom")
	err := run(ctx, lookupOf(db, nil), func(_ context.Context, app *App) error {
		opened = app
		return boom
	})
	require.ErrorIs(t, err, boom)
	require.EqualError(t, err, "setup: boom")
	require.Error(t, opened.Pool().Ping(ctx), "the pool Open made is closed")
}

// TestMainBadEnvironment: a bad variable stops Main before it connects,
// with an error naming the variable and its value.
func TestMainBadEnvironment(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	called := false
	err := run(context.Background(), lookupOf(db, map[string]string{"TRIBUTARY_SHUTDOWN_TIMEOUT": "soon"}), func(context.Context, *App) error {
		called = true
		return nil
	})
	require.ErrorContains(t, err, "TRIBUTARY_SHUTDOWN_TIMEOUT")
	require.ErrorContains(t, err, "soon")
	require.False(t, called, "setup does not run")
}

// TestAddSchedule: AddSchedule declares a schedule that fires; an invalid
// one panics naming its value, and so does a call after Start.
func TestAddSchedule(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	app, err := New(db.Pool, Config{Schema: db.Schema, Logger: pgtest.Logger(t), Cleanup: CleanupConfig{Disabled: true}})
	require.NoError(t, err)
	fired := make(chan struct{}, 1)
	AddWorker(app, river.WorkFunc(func(context.Context, *river.Job[mainArgs]) error {
		select {
		case fired <- struct{}{}:
		default:
		}
		return nil
	}))
	require.PanicsWithError(t, `tributary: AddSchedule: schedule "bad": invalid spec "every now and then": `+
		`expected 5 to 6 fields, found 4: [every now and then]`, func() {
		app.AddSchedule(scheduler.Schedule{Name: "bad", Spec: "every now and then", Args: mainArgs{}})
	})
	app.AddSchedule(scheduler.Schedule{Name: "each-second", Spec: "@every 1s", Args: mainArgs{N: 1}})
	require.NoError(t, app.Start(ctx))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		require.NoError(t, app.Stop(ctx))
	})
	select {
	case <-fired:
	case <-time.After(30 * time.Second):
		t.Fatal("the schedule AddSchedule declared did not fire within 30s")
	}
	require.Panics(t, func() {
		app.AddSchedule(scheduler.Schedule{Name: "late", Spec: "@every 1s", Args: mainArgs{}})
	})
}
