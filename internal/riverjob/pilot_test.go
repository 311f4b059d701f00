package riverjob_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
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

type workingArgs struct {
	Mode string `json:"mode"` // plain, cancel, moved, fail, completetx
}

func (workingArgs) Kind() string { return "riverjob.working" }

// workingWorker does, while its job runs, what others may do to the job's
// row before River's completer reaches it.
type workingWorker struct {
	river.WorkerDefaults[workingArgs]
	pool   *pgxpool.Pool
	schema string
	done   chan *rivertype.JobRow // JobCompleteTx's row
}

func (w *workingWorker) Work(ctx context.Context, job *river.Job[workingArgs]) error {
	switch job.Args.Mode {
	case "cancel": // a cancellation requested while it runs, ignored by the worker
		if _, err := river.ClientFromContext[pgx.Tx](ctx).JobCancel(context.WithoutCancel(ctx), job.ID); err != nil {
			return err
		}
	case "moved": // rescued and rescheduled by someone else
		_, err := w.pool.Exec(ctx, `UPDATE `+pgx.Identifier{w.schema, "river_job"}.Sanitize()+
			` SET state = 'scheduled', scheduled_at = now() + interval '1 hour' WHERE id = $1`, job.ID)
		return err
	case "fail":
		return errors.New("the worker's error")
	case "completetx":
		tx, err := w.pool.Begin(ctx)
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback(ctx) }()
		row, err := river.JobCompleteTx[*riverjob.Driver](ctx, tx, job)
		if err != nil {
			return err
		}
		if err := tx.Commit(ctx); err != nil {
			return err
		}
		w.done <- row.JobRow
	}
	return nil
}

// TestNoteWorking: with every job's row noted when its work begins, River's
// completer completes plain successes with tributary's statement, and what
// River reports (its events, JobCompleteTx's row) and what the rows hold are
// what River's own statement gives: the metadata a cancellation wrote while
// the job ran is in the event's row; a job that someone else moved on before
// the completer reached it keeps its new state; failures, metadata merges
// and noted completions take their own paths.
func TestNoteWorking(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	driver := riverjob.NewDriver(db.Pool)
	workers := river.NewWorkers()
	ww := &workingWorker{pool: db.Pool, schema: db.Schema, done: make(chan *rivertype.JobRow, 1)}
	river.AddWorker(workers, ww)
	river.AddWorker(workers, &noteWorker{pool: db.Pool, schema: db.Schema})
	noteWorking := river.WorkerMiddlewareFunc(func(ctx context.Context, job *rivertype.JobRow, doInner func(context.Context) error) error {
		driver.NoteWorking(job)
		return doInner(ctx)
	})
	rc, err := river.NewClient(driver, &river.Config{
		Schema: db.Schema, Workers: workers, Queues: map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 10}},
		FetchCooldown: 5 * time.Millisecond, FetchPollInterval: 20 * time.Millisecond, Logger: pgtest.Logger(t),
		Middleware: []rivertype.Middleware{noteWorking},
	})
	require.NoError(t, err)
	events, cancel := rc.Subscribe(river.EventKindJobCompleted, river.EventKindJobFailed, river.EventKindJobSnoozed, river.EventKindJobCancelled)
	defer cancel()

	type job struct{ kind, mode string }
	ids := map[job]int64{}
	var params []river.InsertManyParams
	var order []job
	for _, mode := range []string{"plain", "cancel", "moved", "fail", "completetx"} {
		params, order = append(params, river.InsertManyParams{Args: workingArgs{Mode: mode}, InsertOpts: &river.InsertOpts{MaxAttempts: 1}}), append(order, job{"working", mode})
	}
	for _, mode := range []string{"plain", "noted", "merge", "fail"} {
		params, order = append(params, river.InsertManyParams{Args: noteArgs{Mode: mode}, InsertOpts: &river.InsertOpts{MaxAttempts: 1}}), append(order, job{"note", mode})
	}
	for range 200 { // batches of plain successes
		params, order = append(params, river.InsertManyParams{Args: workingArgs{Mode: "plain"}}), append(order, job{"many", "plain"})
	}
	res, err := rc.InsertMany(ctx, params)
	require.NoError(t, err)
	many := map[int64]bool{}
	for i, r := range res {
		if order[i].kind == "many" {
			many[r.Job.ID] = true
		} else {
			ids[order[i]] = r.Job.ID
		}
	}
	require.NoError(t, rc.Start(ctx))
	defer func() { _ = rc.Stop(context.Background()) }()

	got := map[int64]*river.Event{}
	deadline := time.After(30 * time.Second)
	for len(got) < len(res) {
		select {
		case ev := <-events:
			require.NotContains(t, got, ev.Job.ID, "one event per job")
			got[ev.Job.ID] = ev
		case <-deadline:
			t.Fatalf("events of %d of %d jobs", len(got), len(res))
		}
	}
	var txRow *rivertype.JobRow
	select {
	case txRow = <-ww.done:
	default:
		t.Fatal("JobCompleteTx returned no row")
	}

	// The event's row is the database's, whichever statement completed it.
	sameRow := func(what string, ev, row *rivertype.JobRow) {
		t.Helper()
		require.Equal(t, row.State, ev.State, what)
		require.NotNil(t, ev.FinalizedAt, what)
		require.True(t, row.FinalizedAt.Equal(*ev.FinalizedAt), "%s: the event's finalized_at is the row's: %s, %s", what, ev.FinalizedAt, row.FinalizedAt)
		require.True(t, row.AttemptedAt.Equal(*ev.AttemptedAt), what)
		require.JSONEq(t, string(row.Metadata), string(ev.Metadata), what)
		require.JSONEq(t, string(row.EncodedArgs), string(ev.EncodedArgs), what)
		require.Equal(t, []any{row.ID, row.Attempt, row.AttemptedBy, row.Kind, row.Queue, row.Priority, row.MaxAttempts, len(row.Errors), row.Tags},
			[]any{ev.ID, ev.Attempt, ev.AttemptedBy, ev.Kind, ev.Queue, ev.Priority, ev.MaxAttempts, len(ev.Errors), ev.Tags}, what)
	}
	for id := range many {
		ev := got[id]
		require.Equal(t, river.EventKindJobCompleted, ev.Kind)
		sameRow("a plain success of a batch", ev.Job, mustGet(t, rc, id))
	}
	for j, id := range ids {
		ev, row := got[id], mustGet(t, rc, id)
		what := j.kind + " " + j.mode
		switch j.mode {
		case "moved":
			require.Equal(t, rivertype.JobStateScheduled, row.State, "%s: the completer did not complete a job no longer running", what)
			require.Equal(t, rivertype.JobStateScheduled, ev.Job.State, what)
			require.Nil(t, row.FinalizedAt, what)
			continue
		case "fail":
			if j.kind == "note" { // it completed its own job before failing
				require.Equal(t, river.EventKindJobCompleted, ev.Kind, what)
				break
			}
			require.Equal(t, river.EventKindJobFailed, ev.Kind, what)
			require.Equal(t, rivertype.JobStateDiscarded, row.State, what)
			require.Len(t, row.Errors, 1, what)
		default:
			require.Equal(t, river.EventKindJobCompleted, ev.Kind, what)
			require.Equal(t, rivertype.JobStateCompleted, row.State, what)
		}
		if j.mode == "noted" {
			require.Contains(t, string(ev.Job.Metadata), "noted", "%s: the noted row, not the working one", what)
			continue
		}
		sameRow(what, ev.Job, row)
	}
	require.Contains(t, string(mustGet(t, rc, ids[job{"working", "cancel"}]).Metadata), "cancel_attempted_at", "the cancellation's metadata is in the row")
	require.Equal(t, `"out"`, string(mustGet(t, rc, ids[job{"note", "merge"}]).Output()), "the metadata updates were merged")
	row := mustGet(t, rc, ids[job{"working", "completetx"}])
	require.Equal(t, rivertype.JobStateCompleted, txRow.State, "JobCompleteTx's row")
	require.True(t, row.FinalizedAt.Equal(*txRow.FinalizedAt), "JobCompleteTx's row is the database's")
	pgtest.WaitFor(t, 5*time.Second, "the pilot's rows used up", func() (bool, error) { return driver.Working() == 0 && driver.Noted() == 0, nil })
}
