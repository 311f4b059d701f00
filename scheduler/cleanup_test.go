package scheduler

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/jobs/batch"
	"github.com/tributary-run/tributary/jobs/events"
	"github.com/tributary-run/tributary/queue"
)

// featureTargets are the targets the worker cleans, from their features.
func featureTargets() []queue.CleanupTarget {
	return []queue.CleanupTarget{events.OutboxSentCleanup(), events.OutboxFailedCleanup(), events.IdleLaneCleanup(), batch.ObjectCleanup()}
}

// The features' target names.
var (
	targetOutboxSent   = events.OutboxSentCleanup().Name
	targetOutboxFailed = events.OutboxFailedCleanup().Name
	targetEventLanes   = events.IdleLaneCleanup().Name
	targetBatchObjects = batch.ObjectCleanup().Name
)

// newCleaner returns a Cleaner of every feature target.
func newCleaner(t testing.TB, client *queue.Client, cfg CleanerConfig) *Cleaner {
	t.Helper()
	cfg.Targets = featureTargets()
	c, err := NewCleaner(client, cfg)
	require.NoError(t, err)
	return c
}

// seedOutbox inserts n outbox rows with status whose timestamps are at
// (minus a millisecond per row, so they are not all equal).
func seedOutbox(t testing.TB, db *pgtest.DB, status string, n int, at time.Time) {
	t.Helper()
	_, err := db.Pool.Exec(context.Background(), db.Q(`
INSERT INTO /*schema*/tributary_outbox
    (id, event_type, event_version, event_kind, payload, metadata, source_service, status, retry_count,
     created_at, sent_at, failed_at)
SELECT gen_random_uuid(), 'test.cleanup', 1, 'domain', '{"n": 1}', '{}', 'test', $1, 0,
       $2::timestamptz - g * interval '1 millisecond',
       CASE WHEN $1 = 'SENT' THEN $2::timestamptz - g * interval '1 millisecond' END,
       CASE WHEN $1 = 'FAILED' THEN $2::timestamptz - g * interval '1 millisecond' END
FROM generate_series(1, $3) g`), status, at, n)
	require.NoError(t, err)
}

func countOutbox(t testing.TB, db *pgtest.DB) map[string]int {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), db.Q(`SELECT status, count(*) FROM /*schema*/tributary_outbox GROUP BY status`))
	require.NoError(t, err)
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var s string
		var n int
		require.NoError(t, rows.Scan(&s, &n))
		out[s] = n
	}
	require.NoError(t, rows.Err())
	return out
}

func TestCleanupOutbox(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		db      *pgtest.DB
		cleaner *Cleaner
		now     time.Time
		batches []int64
	}
	setup := func(t *testing.T) *testBundle {
		t.Helper()
		db := pgtest.New(t)
		b := &testBundle{db: db, now: time.Now().UTC()}
		b.cleaner = newCleaner(t, db.Client(t), CleanerConfig{
			Logger:  pgtest.Logger(t),
			NowFunc: func() time.Time { return b.now },
			BatchDoneFunc: func(target string, deleted int64, took time.Duration) {
				b.batches = append(b.batches, deleted)
			},
		})
		return b
	}
	day := 24 * time.Hour

	t.Run("SENT past retention go in bounded batches, the rest stay", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		seedOutbox(t, b.db, "SENT", 12_000, b.now.Add(-8*day))
		seedOutbox(t, b.db, "SENT", 3_000, b.now.Add(-6*day))
		seedOutbox(t, b.db, "FAILED", 2_000, b.now.Add(-31*day))
		seedOutbox(t, b.db, "PENDING", 2_000, b.now.Add(-60*day))
		seedOutbox(t, b.db, "CLAIMED", 1_000, b.now.Add(-60*day))

		res, err := b.cleaner.Clean(context.Background(), targetOutboxSent, 7*day, 1000)
		require.NoError(t, err)
		require.EqualValues(t, 12_000, res.Deleted)
		// 12 full batches and one that found nothing left, or more when a
		// slow statement made the batches smaller.
		require.GreaterOrEqual(t, res.Batches, 13)
		require.Len(t, b.batches, res.Batches)
		for _, n := range b.batches {
			require.LessOrEqual(t, n, int64(1000))
		}
		t.Logf("deleted %d rows in %d batches, longest %s, total %s", res.Deleted, res.Batches, res.MaxBatch, res.Duration)
		require.Equal(t, map[string]int{"SENT": 3_000, "FAILED": 2_000, "PENDING": 2_000, "CLAIMED": 1_000}, countOutbox(t, b.db))
		require.Equal(t, CleanupStats{Runs: 1, Deleted: 12_000}, b.cleaner.Stats()[targetOutboxSent])
	})

	t.Run("FAILED past retention go, recent FAILED stay", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		seedOutbox(t, b.db, "FAILED", 2_000, b.now.Add(-31*day))
		seedOutbox(t, b.db, "FAILED", 1_000, b.now.Add(-29*day))
		seedOutbox(t, b.db, "SENT", 500, b.now.Add(-60*day))

		res, err := b.cleaner.Clean(context.Background(), targetOutboxFailed, 30*day, 300)
		require.NoError(t, err)
		require.EqualValues(t, 2_000, res.Deleted)
		require.Equal(t, map[string]int{"FAILED": 1_000, "SENT": 500}, countOutbox(t, b.db))
	})

	t.Run("a statement over the timeout is rolled back and retried smaller", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		seedOutbox(t, b.db, "SENT", 600, b.now.Add(-8*day))
		// Every deleted row costs 2 ms: 1000 rows would take 2 s.
		_, err := b.db.Pool.Exec(context.Background(), b.db.Q(`
CREATE FUNCTION /*schema*/slow_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN PERFORM pg_sleep(0.002); RETURN OLD; END $$;
CREATE TRIGGER slow_delete BEFORE DELETE ON /*schema*/tributary_outbox FOR EACH ROW EXECUTE FUNCTION /*schema*/slow_delete();`))
		require.NoError(t, err)
		cleaner := newCleaner(t, b.db.Client(t), CleanerConfig{
			Logger: pgtest.Logger(t), NowFunc: func() time.Time { return b.now },
			StatementTimeout: 300 * time.Millisecond,
		})
		res, err := cleaner.Clean(context.Background(), targetOutboxSent, 7*day, 1000)
		require.NoError(t, err)
		require.EqualValues(t, 600, res.Deleted)
		require.Positive(t, res.Timeouts, "the first statements hit the timeout")
		require.Empty(t, countOutbox(t, b.db))
		t.Logf("%d statements cancelled, %d completed, longest %s", res.Timeouts, res.Batches, res.MaxBatch)
	})

	t.Run("a missing table is skipped", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.db.Pool.Exec(context.Background(), b.db.Q(`DROP TABLE /*schema*/tributary_batch_object`))
		require.NoError(t, err)
		res, err := b.cleaner.Clean(context.Background(), targetBatchObjects, day, 10)
		require.NoError(t, err)
		require.Contains(t, res.Skipped, "tributary_batch_object")
	})

	t.Run("bad input", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.cleaner.Clean(context.Background(), "everything", day, 10)
		require.ErrorContains(t, err, `unknown clean-up target "everything"`)
		_, err = b.cleaner.Clean(context.Background(), targetOutboxSent, -time.Second, 10)
		require.ErrorContains(t, err, "invalid retention -1s")
	})
}

func TestCleanupBatchObjectsAndLanes(t *testing.T) {
	t.Parallel()

	db := pgtest.New(t)
	now := time.Now().UTC()
	day := 24 * time.Hour
	cleaner := newCleaner(t, db.Client(t), CleanerConfig{Logger: pgtest.Logger(t), NowFunc: func() time.Time { return now }})
	ctx := context.Background()

	_, err := db.Pool.Exec(ctx, db.Q(`
INSERT INTO /*schema*/tributary_batch_object
    (batch_id, stream, key, status, first_item_id, last_item_id, item_count, bytes, compressed_bytes,
     first_item_at, last_item_at, claimed_by_job, claimed_at, written_at)
SELECT gen_random_uuid(), 's' || g, 'key-' || g, CASE WHEN g <= 30 THEN 'written' ELSE 'claimed' END, 1, 2, 2, 10, 5,
       $1, $1, 1, $1, CASE WHEN g <= 20 THEN $1 WHEN g <= 30 THEN $2::timestamptz END
FROM generate_series(1, 40) g`), now.Add(-31*day), now.Add(-time.Hour))
	require.NoError(t, err)
	res, err := cleaner.Clean(ctx, targetBatchObjects, 30*day, 7)
	require.NoError(t, err)
	require.EqualValues(t, 20, res.Deleted, "old written records go; recent and claimed ones stay")
	var left int
	require.NoError(t, db.Pool.QueryRow(ctx, db.Q(`SELECT count(*) FROM /*schema*/tributary_batch_object`)).Scan(&left))
	require.Equal(t, 20, left)

	_, err = db.Pool.Exec(ctx, db.Q(`
INSERT INTO /*schema*/tributary_event_lane (consumer, aggregate_id, head_seq, last_seq, updated_at)
SELECT 'c', 'a' || g, CASE WHEN g <= 10 THEN 5 ELSE 3 END, 4, CASE WHEN g <= 15 THEN $1 ELSE $2::timestamptz END
FROM generate_series(1, 20) g`), now.Add(-8*day), now)
	require.NoError(t, err)
	res, err = cleaner.Clean(ctx, targetEventLanes, 7*day, 3)
	require.NoError(t, err)
	require.EqualValues(t, 10, res.Deleted, "idle old lanes go; busy (head <= last) and recent ones stay")
}

// TestCleanupSchedulesOnByDefault runs the built-in clean-up schedules in a
// runtime (every second instead of hourly) and waits for the old rows to go.
func TestCleanupSchedulesOnByDefault(t *testing.T) {
	t.Parallel()

	db := pgtest.New(t)
	now := time.Now().UTC()
	day := 24 * time.Hour
	seedOutbox(t, db, "SENT", 500, now.Add(-8*day))
	seedOutbox(t, db, "SENT", 100, now.Add(-time.Hour))
	seedOutbox(t, db, "FAILED", 50, now.Add(-31*day))

	schedules, err := CleanupSchedules(CleanupConfig{Targets: featureTargets(), Spec: "@every 1s", BatchSize: 100})
	require.NoError(t, err)
	names := []string{}
	for _, s := range schedules {
		names = append(names, s.Name)
	}
	require.Equal(t, []string{"tributary.cleanup.outbox_sent", "tributary.cleanup.outbox_failed", "tributary.cleanup.event_lanes", "tributary.cleanup.batch_objects"}, names)

	var cleaner *Cleaner
	pgtest.StartRuntime(t, db, queue.RuntimeConfig{}, func(rt *queue.Runtime) {
		var err error
		cleaner, err = RegisterCleanup(rt, CleanerConfig{Targets: featureTargets()})
		require.NoError(t, err)
		s := New(rt.Client, Config{})
		require.NoError(t, s.Add(schedules...))
		require.NoError(t, rt.AddService(s))
	})
	pgtest.WaitFor(t, 20*time.Second, "old outbox rows cleaned", func() (bool, error) {
		c := countOutbox(t, db)
		return c["SENT"] == 100 && c["FAILED"] == 0, nil
	})
	// The run records what it deleted once its last batch is done, after
	// the rows are gone.
	pgtest.WaitFor(t, 20*time.Second, "the outbox_sent run's stats", func() (bool, error) {
		return cleaner.Stats()[targetOutboxSent].Deleted >= 500, nil
	})
	require.EqualValues(t, 500, cleaner.Stats()[targetOutboxSent].Deleted)

	t.Run("a retention of -1 turns a target off", func(t *testing.T) {
		t.Parallel()
		s, err := CleanupSchedules(CleanupConfig{Targets: featureTargets(), Retentions: map[string]time.Duration{targetOutboxFailed: -1, targetEventLanes: -1}})
		require.NoError(t, err)
		require.Len(t, s, 2)
		require.Equal(t, "tributary.cleanup.outbox_sent", s[0].Name)
		require.Equal(t, CleanupArgs{Target: targetOutboxSent, RetentionSeconds: 7 * 24 * 3600}, s[0].Args)
	})
}

func TestCleanupTargetsValidated(t *testing.T) {
	t.Parallel()
	client := &queue.Client{}
	sent := events.OutboxSentCleanup()
	for name, tc := range map[string]struct {
		targets []queue.CleanupTarget
		want    string
	}{
		"BadTable":      {[]queue.CleanupTarget{{Name: "x", Table: "t; DROP TABLE y", Where: "true", Retention: time.Hour}}, `invalid table "t; DROP TABLE y" for clean-up target "x"`},
		"NoCondition":   {[]queue.CleanupTarget{{Name: "x", Table: "t", Retention: time.Hour}}, `clean-up target "x" has no condition`},
		"NoRetention":   {[]queue.CleanupTarget{{Name: "x", Table: "t", Where: "true"}}, `invalid retention 0s for clean-up target "x"`},
		"SameNameTwice": {[]queue.CleanupTarget{sent, sent}, `clean-up target "outbox_sent" is given twice`},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := NewCleaner(client, CleanerConfig{Targets: tc.targets})
			require.ErrorContains(t, err, tc.want)
			_, err = CleanupSchedules(CleanupConfig{Targets: tc.targets})
			require.ErrorContains(t, err, tc.want)
		})
	}

	t.Run("RetentionOfAnUnknownTarget", func(t *testing.T) {
		t.Parallel()
		_, err := CleanupSchedules(CleanupConfig{Targets: []queue.CleanupTarget{sent}, Retentions: map[string]time.Duration{"workflows": time.Hour}})
		require.ErrorContains(t, err, `retention 1h0m0s given for clean-up target "workflows", which is not one of [outbox_sent]`)
	})

	t.Run("OrderByOrdersTheBatch", func(t *testing.T) {
		t.Parallel()
		sql := deleteSQL(queue.CleanupTarget{Name: "x", Table: "t", Where: "done_at < $1", OrderBy: "done_at", Retention: time.Hour})
		require.Contains(t, sql, "WHERE done_at < $1 ORDER BY done_at\n    LIMIT $2 FOR UPDATE SKIP LOCKED")
		require.NotContains(t, deleteSQL(sent), "ORDER BY")

		// And Postgres takes it.
		db := pgtest.New(t)
		seedOutbox(t, db, "SENT", 25, time.Now().Add(-8*24*time.Hour))
		ordered := sent
		ordered.Name, ordered.OrderBy = "outbox_sent_oldest_first", "sent_at"
		cleaner, err := NewCleaner(db.Client(t), CleanerConfig{Targets: []queue.CleanupTarget{ordered}})
		require.NoError(t, err)
		res, err := cleaner.Clean(context.Background(), ordered.Name, 7*24*time.Hour, 10)
		require.NoError(t, err)
		require.EqualValues(t, 25, res.Deleted)
	})
}
