package queue_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/internal/riverjob"
	"github.com/tributary-run/tributary/queue"
)

func TestEnqueueManyTxCopy(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		db     *pgtest.DB
		client *queue.Client
	}
	setup := func(t *testing.T) *testBundle {
		t.Helper()
		db := pgtest.New(t)
		return &testBundle{db: db, client: db.Client(t)}
	}
	later := time.Now().Add(time.Hour).Truncate(time.Microsecond)
	items := []queue.EnqueueItem{
		{Args: queue.RawArgs{KindName: "test.raw", JSON: []byte(` { "a" : [1, 2.50, "x\u00e9"], "b": null } `)}},
		{Args: queue.RawArgs{KindName: "test.raw", JSON: nil}},
		{Args: queue.RawArgs{KindName: "test.other", JSON: []byte(`{"n":1}`)}, Opts: &queue.EnqueueOpts{Queue: "in_bound-2", Priority: 3, MaxAttempts: 7}},
		{Args: queue.RawArgs{KindName: "test.raw", JSON: []byte(`[]`)}, Opts: &queue.EnqueueOpts{ScheduledAt: later, MaxAttempts: 1 << 20}},
	}

	t.Run("WritesWhatRiverWrites", func(t *testing.T) {
		t.Parallel()
		viaCopy, viaRiver := setup(t), setup(t)
		ctx := context.Background()
		require.True(t, queue.CopiesBatch(viaCopy.client, items))

		err := pgx.BeginFunc(ctx, viaCopy.db.Pool, func(tx pgx.Tx) error {
			n, err := viaCopy.client.EnqueueManyTx(ctx, tx, items)
			require.Equal(t, len(items), n)
			return err
		})
		require.NoError(t, err)
		err = pgx.BeginFunc(ctx, viaRiver.db.Pool, func(tx pgx.Tx) error {
			params := make([]river.InsertManyParams, len(items))
			for i, it := range items {
				params[i] = river.InsertManyParams{Args: it.Args}
				if o := it.Opts; o != nil {
					params[i].InsertOpts = &river.InsertOpts{Queue: o.Queue, Priority: o.Priority, MaxAttempts: o.MaxAttempts, ScheduledAt: o.ScheduledAt}
				}
			}
			_, err := viaRiver.client.River().InsertManyFastTx(ctx, tx, params)
			return err
		})
		require.NoError(t, err)
		got, want := viaCopy.db.JobRows(t), viaRiver.db.JobRows(t)
		require.Len(t, want, len(items))
		require.Equal(t, want, got)
	})

	t.Run("WakesTheQueuesProducers", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		ctx := context.Background()
		conn, err := pgx.Connect(ctx, bundle.db.URL)
		require.NoError(t, err)
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, "LISTEN "+pgx.Identifier{riverjob.InsertChannel(bundle.db.Schema)}.Sanitize())
		require.NoError(t, err)

		err = pgx.BeginFunc(ctx, bundle.db.Pool, func(tx pgx.Tx) error {
			_, err := bundle.client.EnqueueManyTx(ctx, tx, items[2:3])
			return err
		})
		require.NoError(t, err)
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		n, err := conn.WaitForNotification(wctx)
		require.NoError(t, err)
		var payload struct{ Queue string }
		require.NoError(t, json.Unmarshal([]byte(n.Payload), &payload))
		require.Equal(t, "in_bound-2", payload.Queue)
	})

	t.Run("RefusesWhatRiverRefuses", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		ctx := context.Background()
		raw := func(kind, body string, o *queue.EnqueueOpts) []queue.EnqueueItem {
			return []queue.EnqueueItem{{Args: queue.RawArgs{KindName: "test.ok", JSON: []byte(`{}`)}}, {Args: queue.RawArgs{KindName: kind, JSON: []byte(body)}, Opts: o}}
		}
		for _, tc := range []struct {
			name    string
			items   []queue.EnqueueItem
			mention string
			args    bool // a *queue.ArgsError
		}{
			{"NotJSON", raw("test.raw", `{"a":`, nil), "not valid JSON", true},
			{"NUL", raw("test.raw", `{"a":"\u0000"}`, nil), `\u0000`, true},
			{"EmptyKind", raw("", `{}`, nil), `job kind ""`, true},
			{"QueueName", raw("test.raw", `{}`, &queue.EnqueueOpts{Queue: "Bad Queue"}), `"Bad Queue"`, false},
			{"LongQueueName", raw("test.raw", `{}`, &queue.EnqueueOpts{Queue: string(make([]byte, 65))}), "64 characters", false},
			{"Priority", raw("test.raw", `{}`, &queue.EnqueueOpts{Priority: 5}), "priority 5", false},
			{"MaxAttempts", raw("test.raw", `{}`, &queue.EnqueueOpts{MaxAttempts: -1}), "max attempts -1", false},
		} {
			tx, err := bundle.db.Pool.Begin(ctx)
			require.NoError(t, err)
			_, err = bundle.client.EnqueueManyTx(ctx, tx, tc.items)
			require.ErrorContains(t, err, "job 1", tc.name)
			require.ErrorContains(t, err, tc.mention, tc.name)
			var argsErr *queue.ArgsError
			require.Equal(t, tc.args, errors.As(err, &argsErr), tc.name)
			_, err = tx.Exec(ctx, "SELECT 1")
			require.NoError(t, err, "%s: the caller's transaction is still usable", tc.name)
			if !tc.args && tc.name != "Priority" && tc.name != "MaxAttempts" {
				// River's own insert refuses the same queue name.
				o := tc.items[1].Opts
				_, err = bundle.client.River().InsertManyFastTx(ctx, tx, []river.InsertManyParams{{Args: tc.items[1].Args, InsertOpts: &river.InsertOpts{Queue: o.Queue}}})
				require.Error(t, err, tc.name)
			}
			require.NoError(t, tx.Rollback(ctx))
		}
		_, err := bundle.client.EnqueueManyTx(ctx, nil, nil)
		require.Error(t, err, "an empty batch is River's error")
		require.Zero(t, bundle.db.CountJobs(t))
	})

	t.Run("RiverInsertsWhatOnlyItHandles", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		for name, it := range map[string]queue.EnqueueItem{
			"Typed":      {Args: countArgs{Key: "k"}},
			"Unique":     {Args: queue.RawArgs{KindName: "test.raw", JSON: []byte(`{}`)}, Opts: &queue.EnqueueOpts{Unique: true}},
			"UniqueOpts": {Args: queue.RawArgs{KindName: "test.raw", JSON: []byte(`{}`)}, Opts: &queue.EnqueueOpts{UniqueOpts: &river.UniqueOpts{ByArgs: true}}},
			"Tags":       {Args: queue.RawArgs{KindName: "test.raw", JSON: []byte(`{}`)}, Opts: &queue.EnqueueOpts{Tags: []string{"a-tag"}}},
		} {
			require.False(t, queue.CopiesBatch(bundle.client, append([]queue.EnqueueItem{items[0]}, it)), name)
		}
	})

	t.Run("RuntimeClientCopiesOnlyKindsRiverAccepted", func(t *testing.T) {
		t.Parallel()
		db := pgtest.New(t)
		rt, err := queue.NewRuntime(db.Pool, queue.RuntimeConfig{Schema: db.Schema, Logger: pgtest.Logger(t)})
		require.NoError(t, err)
		queue.AddWorker(rt, &countWorker{})
		ctx := context.Background()
		known := []queue.EnqueueItem{{Args: queue.RawArgs{KindName: countArgs{}.Kind(), JSON: []byte(`{"key":"k"}`)}}}
		unknown := []queue.EnqueueItem{{Args: queue.RawArgs{KindName: "test.unregistered", JSON: []byte(`{}`)}}}

		require.False(t, queue.CopiesBatch(rt.Client, known), "River has not checked the kind yet")
		tx, err := db.Pool.Begin(ctx)
		require.NoError(t, err)
		_, err = rt.EnqueueManyTx(ctx, tx, unknown)
		var unknownKind *river.UnknownJobKindError
		require.ErrorAs(t, err, &unknownKind)
		require.NoError(t, tx.Rollback(ctx))
		require.NoError(t, pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
			_, err := rt.EnqueueManyTx(ctx, tx, known)
			return err
		}))
		require.True(t, queue.CopiesBatch(rt.Client, known), "River accepted the kind")
		require.False(t, queue.CopiesBatch(rt.Client, unknown))
		require.Equal(t, 1, db.CountJobs(t, rivertype.JobStateAvailable))
	})
}
