package tributarytest_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary"
	"github.com/tributary-run/tributary/jobs/events"
	"github.com/tributary-run/tributary/tributarytest"
)

type WelcomeArgs struct {
	UserID string `json:"user_id"`
}

func (WelcomeArgs) Kind() string { return "users.welcome" }

type SignedUpV1 struct {
	UserID string `json:"user_id"`
}

var SignedUp = events.Define[SignedUpV1]("users.signed_up", nil)

// signUp is the code under test: the user's row, the welcome job and the
// event commit together.
func signUp(ctx context.Context, app *tributary.App, tx pgx.Tx, userID string) error {
	if _, err := tx.Exec(ctx, "INSERT INTO users (id) VALUES ($1)", userID); err != nil {
		return err
	}
	if _, err := app.EnqueueTx(ctx, tx, WelcomeArgs{UserID: userID}, nil); err != nil {
		return err
	}
	_, err := app.EmitTx(ctx, tx, SignedUp, SignedUpV1{UserID: userID}, events.Meta{AggregateID: userID})
	return err
}

// testSignUp is a test of the user's own code (TestSignUp in their
// module): on a schema of its own, it checks what the transaction enqueued
// and emitted, then runs the work to completion.
func testSignUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := tributarytest.NewDB(t, nil) // migrated; the pool's search_path is the schema
	_, err := db.Pool.Exec(ctx, "CREATE TABLE users (id text PRIMARY KEY)")
	require.NoError(t, err)

	welcomed := make(chan string, 1)
	app, err := tributary.New(db.Pool, tributary.Config{
		Schema: db.Schema, Logger: tributarytest.Logger(t),
		Events: tributary.EventsConfig{Types: []events.Definition{SignedUp}},
	})
	require.NoError(t, err)
	tributary.AddWorker(app, river.WorkFunc(func(ctx context.Context, job *river.Job[WelcomeArgs]) error {
		welcomed <- job.Args.UserID
		return nil
	}))

	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }() // a no-op once committed
	require.NoError(t, signUp(ctx, app, tx, "u-1"))
	job := tributarytest.RequireEnqueuedTx[WelcomeArgs](ctx, t, tx, &tributarytest.RequireEnqueuedOpts{Queue: river.QueueDefault})
	require.Equal(t, "u-1", job.Args.UserID)
	tributarytest.RequireEmittedTx(ctx, t, tx, SignedUp.Name(), &tributarytest.RequireEmittedOpts{AggregateID: "u-1"})
	require.NoError(t, tx.Commit(ctx))

	tributarytest.WorkUntilIdle(ctx, t, db, app, nil) // start, run everything due, stop
	require.Equal(t, "u-1", <-welcomed)
	tributarytest.RequireEnqueued[WelcomeArgs](ctx, t, db.Pool, &tributarytest.RequireEnqueuedOpts{State: rivertype.JobStateCompleted})
}

// A test with tributarytest; TestExampleSignUp runs it.
func Example() {
	_ = testSignUp // a test function, so the example compiles it and TestExampleSignUp runs it
}
