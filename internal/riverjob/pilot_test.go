package riverjob_test

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
)

type noteArgs struct {
	Mode string `json:"mode"` // plain, noted, merge, fail
}

func (noteArgs) Kind() string { return "riverjob.note" }

// noteWorker completes its own job in a transaction and notes it (but in
// mode plain), as the workflow coordinator does; the noted metadata carries
// a marker the row in the database does not have, so an event with it
// shows that River's completer took the noted row.
type noteWorker struct {
	river.WorkerDefaults[noteArgs]
	pool interface {
		Begin(context.Context) (pgx.Tx, error)
	}
	schema string
}

func (w *noteWorker) Work(ctx context.Context, job *river.Job[noteArgs]) error {
	if job.Args.Mode == "plain" {
		return nil
	}
	now := time.Now().UTC()
	tx, err := w.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(ctx) }()
	done, err := riverjob.CompleteRunning(ctx, tx, w.schema, []riverjob.Attempt{{ID: job.ID, Attempt: job.Attempt}}, now)
	if err != nil {
		return err
	}
	if len(done) != 1 {
		return errors.New("job not completed")
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	riverjob.NoteCompleted(ctx, job.JobRow, now, []byte(`{"noted": true}`))
	switch job.Args.Mode {
	case "merge":
		return river.RecordOutput(ctx, "out")
	case "fail":
		return errors.New("the worker's error after its completion")
	}
	return nil
}

// TestNoteCompleted: River's completer takes a noted job's row from the
// pilot when the worker succeeded without metadata updates, and reads the
// database otherwise (metadata to merge, another result, a job not noted),
// so River's events and metadata merges stay as they were.
func TestNoteCompleted(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	workers := river.NewWorkers()
	river.AddWorker(workers, &noteWorker{pool: db.Pool, schema: db.Schema})
	driver := riverjob.NewDriver(db.Pool)
	rc, err := river.NewClient(driver, &river.Config{
		Schema: db.Schema, Workers: workers, Queues: map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 10}},
		FetchCooldown: 5 * time.Millisecond, FetchPollInterval: 20 * time.Millisecond, Logger: pgtest.Logger(t),
	})
	require.NoError(t, err)
	events, cancel := rc.Subscribe(river.EventKindJobCompleted, river.EventKindJobFailed)
	defer cancel()
	require.NoError(t, rc.Start(ctx))
	defer func() { _ = rc.Stop(context.Background()) }()

	ids := map[string]int64{}
	for _, mode := range []string{"plain", "noted", "merge", "fail"} {
		res, err := rc.Insert(ctx, noteArgs{Mode: mode}, &river.InsertOpts{MaxAttempts: 1})
		require.NoError(t, err)
		ids[mode] = res.Job.ID
	}
	got := map[int64]*rivertype.JobRow{}
	deadline := time.After(20 * time.Second)
	for len(got) < len(ids) {
		select {
		case ev := <-events:
			got[ev.Job.ID] = ev.Job
		case <-deadline:
			t.Fatalf("events of %d of %d jobs", len(got), len(ids))
		}
	}
	meta := func(job *rivertype.JobRow) map[string]any {
		m := map[string]any{}
		require.NoError(t, json.Unmarshal(job.Metadata, &m))
		return m
	}
	for mode, id := range ids {
		ev := got[id]
		row, err := rc.JobGet(ctx, id)
		require.NoError(t, err)
		require.Equal(t, rivertype.JobStateCompleted, ev.State, mode)
		require.Equal(t, rivertype.JobStateCompleted, row.State, mode)
		require.NotNil(t, ev.FinalizedAt, mode)
		require.True(t, row.FinalizedAt.Equal(*ev.FinalizedAt), "%s: the event's finalized_at is the row's: %s, %s", mode, ev.FinalizedAt, row.FinalizedAt)
		require.Equal(t, row.Attempt, ev.Attempt, mode)
		require.Equal(t, row.AttemptedBy, ev.AttemptedBy, mode)
		_, marked := meta(ev)["noted"]
		require.Equal(t, mode == "noted", marked, "%s: only the noted success is taken from the pilot: %s", mode, ev.Metadata)
		require.NotContains(t, meta(row), "noted", mode)
	}
	require.Equal(t, `"out"`, string(mustGet(t, rc, ids["merge"]).Output()), "the metadata updates of a noted job were merged by River's statement")
	pgtest.WaitFor(t, 5*time.Second, "the pilot's noted rows used up", func() (bool, error) { return driver.Noted() == 0, nil })
}

func mustGet(t *testing.T, rc *river.Client[pgx.Tx], id int64) *rivertype.JobRow {
	t.Helper()
	row, err := rc.JobGet(context.Background(), id)
	require.NoError(t, err)
	return row
}
