package inbox_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/jobs/inbox"
	"github.com/tributary-run/tributary/queue"
)

// call is one run of a handler.
type call struct {
	msg     inbox.Message
	process string // which runtime ran it
}

// recorder keeps the handler's runs.
type recorder struct {
	mu    sync.Mutex
	calls []call
}

func (r *recorder) add(process string, m *inbox.Message) {
	c := call{msg: *m, process: process}
	c.msg.Body = bytes.Clone(m.Body)
	r.mu.Lock()
	r.calls = append(r.calls, c)
	r.mu.Unlock()
}

func (r *recorder) snapshot() []call {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]call(nil), r.calls...)
}

// ids lists the ids of the runs that match pred (all with nil), in order.
func (r *recorder) ids(pred func(call) bool) []string {
	var out []string
	for _, c := range r.snapshot() {
		if pred == nil || pred(c) {
			out = append(out, c.msg.ID)
		}
	}
	return out
}

type testBundle struct {
	db  *pgtest.DB
	ib  *inbox.Inbox
	w   *inbox.Writer
	rec *recorder
	// handle decides each run's outcome after it is recorded; nil succeeds.
	handle func(ctx context.Context, m *inbox.Message) error
}

// setup returns an inbox on a fresh schema whose handler records every run
// and then returns what b.handle says; cfg's Name and HandleFunc are set
// here, short retry delays unless cfg says otherwise.
func setup(t *testing.T, cfg inbox.Config) *testBundle {
	t.Helper()
	b := &testBundle{db: pgtest.New(t), rec: &recorder{}}
	cfg.Name = "orders"
	if cfg.RetryDelayFunc == nil {
		cfg.RetryDelayFunc = func(int) time.Duration { return 10 * time.Millisecond }
	}
	cfg.HandleFunc = func(ctx context.Context, m *inbox.Message) error {
		b.rec.add(processFrom(ctx), m)
		if b.handle == nil {
			return nil
		}
		return b.handle(ctx, m)
	}
	var err error
	b.ib, err = inbox.New(cfg)
	require.NoError(t, err)
	b.w, err = b.ib.Writer(b.db.Schema)
	require.NoError(t, err)
	return b
}

type processKey struct{}

// processFrom is the name the runtime running ctx's job was started with
// (start).
func processFrom(ctx context.Context) string {
	s, _ := ctx.Value(processKey{}).(string)
	return s
}

// start runs a runtime named process with the inbox installed; its jobs'
// contexts carry the name.
func (b *testBundle) start(t *testing.T, process string, cfg queue.RuntimeConfig) *queue.Runtime {
	t.Helper()
	cfg.Middleware = append(cfg.Middleware, nameMiddleware{process})
	return pgtest.StartRuntime(t, b.db, cfg, func(rt *queue.Runtime) {
		require.NoError(t, inbox.Install(rt, b.ib))
	})
}

type nameMiddleware struct{ name string }

func (nameMiddleware) IsMiddleware() bool { return true }
func (m nameMiddleware) Work(ctx context.Context, job *rivertype.JobRow, doInner func(context.Context) error) error {
	return doInner(context.WithValue(ctx, processKey{}, m.name))
}

// insert writes msgs as one batch and wakes River.
func (b *testBundle) insert(t *testing.T, msgs ...inbox.Message) int64 {
	t.Helper()
	ctx := context.Background()
	batch := inbox.NewBatch()
	defer batch.Release()
	for i := range msgs {
		require.NoError(t, batch.Add(&msgs[i]))
	}
	var id int64
	require.NoError(t, pgx.BeginFunc(ctx, b.db.Pool, func(tx pgx.Tx) error {
		var err error
		id, err = b.w.InsertTx(ctx, tx, batch)
		return err
	}))
	require.NoError(t, b.w.Wake(ctx, b.db.Pool))
	return id
}

// messages returns n messages with ids m-0 ... and JSON bodies.
func messages(n int) []inbox.Message {
	out := make([]inbox.Message, n)
	for i := range out {
		out[i] = inbox.Message{ID: fmt.Sprintf("m-%d", i), Type: "order.placed", Body: fmt.Appendf(nil, `{"n":%d}`, i)}
	}
	return out
}

// jobs lists the schema's jobs of kind, in id order.
func (b *testBundle) jobs(t *testing.T, kind string) []*rivertype.JobRow {
	t.Helper()
	res, err := b.db.Client(t).River().JobList(context.Background(), river.NewJobListParams().Kinds(kind).OrderBy(river.JobListOrderByID, river.SortOrderAsc).First(1000))
	require.NoError(t, err)
	return res.Jobs
}

// batchRows counts the schema's batch rows.
func (b *testBundle) batchRows(t *testing.T) int {
	t.Helper()
	var n int
	require.NoError(t, b.db.Pool.QueryRow(context.Background(), b.db.Q(`SELECT count(*) FROM /*schema*/tributary_inbox_batch`)).Scan(&n))
	return n
}

// messageJob is the message job of the message with id, nil when there is
// none.
func (b *testBundle) messageJob(t *testing.T, id string) *rivertype.JobRow {
	t.Helper()
	for _, j := range b.jobs(t, inbox.MessageKind) {
		if bytes.Contains(j.EncodedArgs, fmt.Appendf(nil, `"id": %q`, id)) {
			return j
		}
	}
	return nil
}

func TestInbox(t *testing.T) {
	t.Parallel()

	t.Run("HandlesEachMessageOnceInOrderWithEveryField", func(t *testing.T) {
		t.Parallel()
		b := setup(t, inbox.Config{})
		at := time.Date(2026, 12, 3, 6, 0, 0, 123456789, time.UTC)
		msgs := []inbox.Message{
			{ID: "m-0", Type: "order.placed", CorrelationID: "c-1", ContentType: "application/json", Source: "orders-q",
				RoutingKey: "order.placed", Timestamp: at, Body: []byte(`{"order_id": 7,  "b": 1, "a": 2}`),
				Headers: map[string]any{"s": "x", "i": 3, "f": 2.5, "b": true, "null": nil, "list": []any{1, "two"}, "obj": map[string]any{"k": "v"}}},
			{ID: "m-1", ContentType: "application/octet-stream", Body: []byte{0, 0xff, 0xfe, 0x80, '"', '\\', 0}},
			{ID: "m-2"},
		}
		msgs = append(msgs, messages(7)[3:]...)
		id := b.insert(t, msgs...)
		require.Equal(t, 1, b.batchRows(t))
		b.start(t, "p1", queue.RuntimeConfig{})

		pgtest.WaitFor(t, 15*time.Second, "the batch job to complete", func() (bool, error) {
			jobs := b.jobs(t, inbox.BatchKind)
			return len(jobs) == 1 && jobs[0].State == rivertype.JobStateCompleted, nil
		})
		calls := b.rec.snapshot()
		require.Len(t, calls, len(msgs), "each message once")
		for i, c := range calls {
			want, got := msgs[i], c.msg
			require.Equal(t, want.ID, got.ID, "in order")
			require.Equal(t, want.Type, got.Type)
			require.Equal(t, want.CorrelationID, got.CorrelationID)
			require.Equal(t, want.ContentType, got.ContentType)
			require.Equal(t, want.Source, got.Source)
			require.Equal(t, want.RoutingKey, got.RoutingKey)
			require.True(t, want.Timestamp.Equal(got.Timestamp))
			require.True(t, bytes.Equal(want.Body, got.Body), "message %s: body %q, want %q (byte for byte)", want.ID, got.Body, want.Body)
			require.Equal(t, 1, got.Attempt)
		}
		require.Equal(t, map[string]any{"s": "x", "i": int64(3), "f": 2.5, "b": true, "null": nil,
			"list": []any{int64(1), "two"}, "obj": map[string]any{"k": "v"}}, calls[0].msg.Headers)
		require.Nil(t, calls[1].msg.Headers)
		require.Zero(t, b.batchRows(t), "the row went with the job's completion")
		require.Empty(t, b.jobs(t, inbox.MessageKind))
		st := b.ib.Stats()
		require.Equal(t, inbox.Stats{Handled: int64(len(msgs)), Batches: 1}, st)
		require.Positive(t, id)
	})

	t.Run("FailedMessageRetriesAloneUntilItSucceeds", func(t *testing.T) {
		t.Parallel()
		b := setup(t, inbox.Config{})
		b.handle = func(_ context.Context, m *inbox.Message) error {
			if m.ID == "flaky" && m.Attempt < 3 {
				return fmt.Errorf("downstream unavailable (attempt %d)", m.Attempt)
			}
			return nil
		}
		binary := []byte{0xde, 0xad, 0, 0xbe, 0xef}
		msgs := messages(5)
		msgs[2] = inbox.Message{ID: "flaky", Type: "t", CorrelationID: "c", ContentType: "application/x-bin", Source: "q", RoutingKey: "rk",
			Timestamp: time.Unix(1764741600, 5).UTC(), Headers: map[string]any{"x-n": 1, "x-s": "é"}, Body: binary}
		b.insert(t, msgs...)
		b.start(t, "p1", queue.RuntimeConfig{})

		pgtest.WaitFor(t, 15*time.Second, "the flaky message's job to complete", func() (bool, error) {
			j := b.messageJob(t, "flaky")
			return j != nil && j.State == rivertype.JobStateCompleted, nil
		})
		require.Equal(t, []string{"m-0", "m-1", "flaky", "m-3", "m-4", "flaky", "flaky"}, b.rec.ids(nil), "the siblings ran once")
		j := b.messageJob(t, "flaky")
		require.Equal(t, 3, j.Attempt)
		require.Len(t, j.Errors, 2)
		require.Contains(t, j.Errors[0].Error, "downstream unavailable (attempt 1)")
		require.Contains(t, j.Errors[1].Error, "downstream unavailable (attempt 2)")
		require.Equal(t, 25, j.MaxAttempts)
		require.Contains(t, string(j.EncodedArgs), `"body_base64"`, "a binary body is stored in base64")
		for _, c := range b.rec.snapshot()[5:] {
			require.True(t, bytes.Equal(binary, c.msg.Body), "the retried body, byte for byte: %x", c.msg.Body)
			require.Equal(t, map[string]any{"x-n": int64(1), "x-s": "é"}, c.msg.Headers)
			require.Equal(t, "c", c.msg.CorrelationID)
			require.Equal(t, "q", c.msg.Source)
			require.Equal(t, "rk", c.msg.RoutingKey)
			require.Equal(t, "application/x-bin", c.msg.ContentType)
			require.True(t, time.Unix(1764741600, 5).Equal(c.msg.Timestamp))
		}
		batches := b.jobs(t, inbox.BatchKind)
		require.Len(t, batches, 1)
		require.Equal(t, rivertype.JobStateCompleted, batches[0].State, "the batch completed with its failure recorded apart")
		require.Zero(t, b.batchRows(t))
		st := b.ib.Stats()
		require.Equal(t, int64(5), st.Handled)
		require.Equal(t, int64(2), st.Failed)
	})

	t.Run("PanicIsAFailedAttemptWithItsStack", func(t *testing.T) {
		t.Parallel()
		b := setup(t, inbox.Config{})
		b.handle = func(_ context.Context, m *inbox.Message) error {
			if m.ID == "m-1" && m.Attempt < 3 {
				panicInHandler(m.Attempt)
			}
			return nil
		}
		b.insert(t, messages(3)...)
		b.start(t, "p1", queue.RuntimeConfig{})
		pgtest.WaitFor(t, 15*time.Second, "the panicking message's job to complete", func() (bool, error) {
			j := b.messageJob(t, "m-1")
			return j != nil && j.State == rivertype.JobStateCompleted, nil
		})
		j := b.messageJob(t, "m-1")
		require.Len(t, j.Errors, 2)
		// In the batch, recovered by the inbox; in its own job, raised
		// again for River: both record the handler's stack.
		require.Contains(t, j.Errors[0].Error, "handler panicked: kaboom 1")
		require.Contains(t, j.Errors[0].Trace, "panicInHandler")
		require.Contains(t, j.Errors[1].Error, "kaboom 2")
		require.Contains(t, j.Errors[1].Trace, "panicInHandler")
		require.Equal(t, []string{"m-0", "m-1", "m-2", "m-1", "m-1"}, b.rec.ids(nil))
		st := b.ib.Stats()
		require.Equal(t, int64(2), st.Panics)
		require.Equal(t, int64(2), st.Failed)
		require.Equal(t, int64(3), st.Handled)
	})

	t.Run("GivenUpStaysInspectable", func(t *testing.T) {
		t.Parallel()
		b := setup(t, inbox.Config{MaxAttempts: 3})
		b.handle = func(_ context.Context, m *inbox.Message) error {
			switch {
			case m.ID == "always":
				return errors.New("always failing")
			case m.ID == "permanent":
				return inbox.Permanent(errors.New("malformed order"))
			case m.ID == "late-permanent" && m.Attempt == 1:
				return errors.New("try again")
			case m.ID == "late-permanent":
				return inbox.Permanent(errors.New("now it is malformed"))
			case m.ID == "cancel":
				return river.JobCancel(errors.New("nobody wants it"))
			}
			return nil
		}
		b.insert(t, inbox.Message{ID: "always", Body: []byte(`{"a":1}`)}, inbox.Message{ID: "permanent"}, inbox.Message{ID: "ok"},
			inbox.Message{ID: "late-permanent"}, inbox.Message{ID: "cancel"})
		b.start(t, "p1", queue.RuntimeConfig{})
		pgtest.WaitFor(t, 15*time.Second, "every message given up", func() (bool, error) {
			for id, want := range map[string]rivertype.JobState{"always": rivertype.JobStateDiscarded, "permanent": rivertype.JobStateDiscarded,
				"late-permanent": rivertype.JobStateDiscarded, "cancel": rivertype.JobStateCancelled} {
				if j := b.messageJob(t, id); j == nil || j.State != want {
					return false, nil
				}
			}
			return true, nil
		})
		always := b.messageJob(t, "always")
		require.Equal(t, 3, always.Attempt, "MaxAttempts")
		require.Len(t, always.Errors, 3)
		require.Contains(t, string(always.EncodedArgs), `"body": {"a": 1}`, "a JSON body is stored as JSON")
		permanent := b.messageJob(t, "permanent")
		require.Equal(t, 1, permanent.Attempt, "not retried")
		require.Contains(t, permanent.Errors[0].Error, "malformed order")
		require.NotNil(t, permanent.FinalizedAt)
		late := b.messageJob(t, "late-permanent")
		require.Equal(t, 2, late.Attempt, "discarded before its attempts were used up")
		require.Len(t, late.Errors, 2, "River did not append the error again after the worker discarded the job")
		require.Contains(t, late.Errors[1].Error, "now it is malformed")
		require.Contains(t, b.messageJob(t, "cancel").Errors[0].Error, "nobody wants it")
		ran := b.rec.ids(nil)
		require.Equal(t, []string{"always", "permanent", "ok", "late-permanent", "cancel"}, ran[:5], "the batch")
		require.ElementsMatch(t, []string{"always", "always", "late-permanent"}, ran[5:], "the retries, each in its own job")
		require.Equal(t, int64(4), b.ib.Stats().GivenUp)

		// An operator's retry runs a discarded message again.
		b.handle = nil
		_, err := b.db.Client(t).River().JobRetry(context.Background(), always.ID)
		require.NoError(t, err)
		pgtest.WaitFor(t, 15*time.Second, "the retried message to complete", func() (bool, error) {
			return b.messageJob(t, "always").State == rivertype.JobStateCompleted, nil
		})
	})

	t.Run("SlowBatchSplitsTheRestIntoJobs", func(t *testing.T) {
		t.Parallel()
		b := setup(t, inbox.Config{SplitAfter: 20 * time.Millisecond})
		b.handle = func(_ context.Context, m *inbox.Message) error {
			if m.ID == "m-0" {
				time.Sleep(40 * time.Millisecond) // a slow handler, past SplitAfter
			}
			return nil
		}
		b.insert(t, messages(5)...)
		b.start(t, "p1", queue.RuntimeConfig{})
		pgtest.WaitFor(t, 15*time.Second, "every message handled", func() (bool, error) {
			done := 0
			for _, j := range b.jobs(t, inbox.MessageKind) {
				if j.State == rivertype.JobStateCompleted {
					done++
				}
			}
			return done == 4, nil
		})
		require.ElementsMatch(t, []string{"m-0", "m-1", "m-2", "m-3", "m-4"}, b.rec.ids(nil), "each once")
		require.Equal(t, "m-0", b.rec.ids(nil)[0])
		for _, j := range b.jobs(t, inbox.MessageKind) {
			require.Equal(t, 1, j.Attempt, "split off before any attempt")
			require.Empty(t, j.Errors)
		}
		require.Equal(t, int64(4), b.ib.Stats().Split)
		require.Zero(t, b.batchRows(t))
	})

	t.Run("ShutdownMidBatchContinuesAfterRestart", func(t *testing.T) {
		t.Parallel()
		b := setup(t, inbox.Config{SplitAfter: -1})
		started := make(chan struct{})
		var once sync.Once
		b.handle = func(ctx context.Context, m *inbox.Message) error {
			if m.ID == "m-2" && processFrom(ctx) == "p1" {
				once.Do(func() { close(started) })
				<-ctx.Done() // a handler that only a hard stop ends
				return ctx.Err()
			}
			return nil
		}
		b.insert(t, messages(5)...)
		rt := b.start(t, "p1", queue.RuntimeConfig{ShutdownTimeout: 100 * time.Millisecond})
		select {
		case <-started:
		case <-time.After(15 * time.Second):
			t.Fatal("message m-2 never started")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		require.NoError(t, rt.Stop(ctx))

		batches := b.jobs(t, inbox.BatchKind)
		require.Len(t, batches, 2, "the interrupted job and the one that runs the rest")
		require.Equal(t, rivertype.JobStateCompleted, batches[0].State)
		require.Equal(t, rivertype.JobStateAvailable, batches[1].State)
		require.JSONEq(t, `{"inbox":"orders","batch":1,"from":2,"count":3}`, string(batches[1].EncodedArgs))
		require.Equal(t, 1, b.batchRows(t), "the row stays for the rest")

		b.start(t, "p2", queue.RuntimeConfig{})
		pgtest.WaitFor(t, 15*time.Second, "the rest handled after the restart", func() (bool, error) {
			return b.batchRows(t) == 0, nil
		})
		require.Equal(t, []string{"m-0", "m-1", "m-2"}, b.rec.ids(func(c call) bool { return c.process == "p1" }))
		require.Equal(t, []string{"m-2", "m-3", "m-4"}, b.rec.ids(func(c call) bool { return c.process == "p2" }),
			"the finished messages did not run again")
		require.Equal(t, rivertype.JobStateCompleted, b.jobs(t, inbox.BatchKind)[1].State)
		require.Empty(t, b.jobs(t, inbox.MessageKind))
	})

	t.Run("JobOfAnInboxNotInstalledWaits", func(t *testing.T) {
		t.Parallel()
		b := setup(t, inbox.Config{})
		other, err := inbox.New(inbox.Config{Name: "elsewhere", HandleFunc: func(context.Context, *inbox.Message) error { return nil }})
		require.NoError(t, err)
		w, err := other.Writer(b.db.Schema)
		require.NoError(t, err)
		ctx := context.Background()
		require.NoError(t, pgx.BeginFunc(ctx, b.db.Pool, func(tx pgx.Tx) error {
			_, err := w.InsertMessagesTx(ctx, tx, messages(2))
			return err
		}))
		b.start(t, "p1", queue.RuntimeConfig{})
		var j *rivertype.JobRow
		pgtest.WaitFor(t, 15*time.Second, "the batch job snoozed", func() (bool, error) {
			jobs := b.jobs(t, inbox.BatchKind)
			if len(jobs) != 1 || jobs[0].State == rivertype.JobStateRunning {
				return false, nil
			}
			j = jobs[0]
			var meta struct {
				Snoozes int `json:"snoozes"`
			}
			return meta.Snoozes > 0, json.Unmarshal(j.Metadata, &meta)
		})
		require.Contains(t, []rivertype.JobState{rivertype.JobStateAvailable, rivertype.JobStateScheduled}, j.State)
		require.True(t, j.ScheduledAt.After(j.CreatedAt), "put off for its next look")
		require.Equal(t, 0, j.Attempt, "a snooze spends no attempt")
		require.Empty(t, b.rec.snapshot())
		require.Equal(t, 1, b.batchRows(t))
	})

	t.Run("BatchRowGoneCancelsItsJob", func(t *testing.T) {
		t.Parallel()
		b := setup(t, inbox.Config{})
		id := b.insert(t, messages(2)...)
		_, err := b.db.Pool.Exec(context.Background(), b.db.Q(`DELETE FROM /*schema*/tributary_inbox_batch WHERE id = $1`), id)
		require.NoError(t, err)
		b.start(t, "p1", queue.RuntimeConfig{})
		pgtest.WaitFor(t, 15*time.Second, "the batch job cancelled", func() (bool, error) {
			jobs := b.jobs(t, inbox.BatchKind)
			return len(jobs) == 1 && jobs[0].State == rivertype.JobStateCancelled, nil
		})
		require.Contains(t, b.jobs(t, inbox.BatchKind)[0].Errors[0].Error, fmt.Sprintf(`inbox "orders" batch %d is gone`, id))
		require.Empty(t, b.rec.snapshot())
	})
}

// panicInHandler panics; the recorded traces must name it.
func panicInHandler(attempt int) {
	panic(fmt.Sprintf("kaboom %d", attempt))
}

func TestInstall(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	handle := func(context.Context, *inbox.Message) error { return nil }
	a, err := inbox.New(inbox.Config{Name: "a", HandleFunc: handle})
	require.NoError(t, err)
	a2, err := inbox.New(inbox.Config{Name: "a", HandleFunc: handle})
	require.NoError(t, err)
	b, err := inbox.New(inbox.Config{Name: "b", HandleFunc: handle, Queue: "other"})
	require.NoError(t, err)
	rt, err := queue.NewRuntime(db.Pool, queue.RuntimeConfig{Schema: db.Schema, Logger: pgtest.Logger(t)})
	require.NoError(t, err)
	require.ErrorContains(t, inbox.Install(rt, a, a2), `inbox "a" is given twice`)
	require.NoError(t, inbox.Install(rt, a, b), "several inboxes, one set of workers")
	require.ErrorContains(t, inbox.Install(rt, b), "give every inbox to one Install call")
}

// TestInstallWithoutInboxesWaits: a process that installed the workers
// without any inbox (as `tributary worker` does) and works the queue an
// inbox's jobs are on puts them off for a process that runs the inbox,
// spending no attempt, rather than failing them as of an unknown kind.
func TestInstallWithoutInboxesWaits(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	ib, err := inbox.New(inbox.Config{Name: "elsewhere", HandleFunc: func(context.Context, *inbox.Message) error { return nil }})
	require.NoError(t, err)
	w, err := ib.Writer(db.Schema)
	require.NoError(t, err)
	require.NoError(t, pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		_, err := w.InsertMessagesTx(ctx, tx, messages(3))
		return err
	}))
	pgtest.StartRuntime(t, db, queue.RuntimeConfig{}, func(rt *queue.Runtime) {
		require.NoError(t, inbox.Install(rt))
	})
	var j *rivertype.JobRow
	pgtest.WaitFor(t, 15*time.Second, "the batch job snoozed", func() (bool, error) {
		res, err := db.Client(t).River().JobList(ctx, river.NewJobListParams().Kinds(inbox.BatchKind).First(10))
		if err != nil || len(res.Jobs) != 1 || res.Jobs[0].State == rivertype.JobStateRunning {
			return false, err
		}
		j = res.Jobs[0]
		var meta struct {
			Snoozes int `json:"snoozes"`
		}
		return meta.Snoozes > 0, json.Unmarshal(j.Metadata, &meta)
	})
	require.Equal(t, 0, j.Attempt, "a snooze spends no attempt")
	require.Empty(t, j.Errors, "not failed as a job of an unknown kind")
	var rows int
	require.NoError(t, db.Pool.QueryRow(ctx, db.Q(`SELECT count(*) FROM /*schema*/tributary_inbox_batch`)).Scan(&rows))
	require.Equal(t, 1, rows, "the batch row stays for the inbox's process")
}
