package batch

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"regexp"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/internal/servicetest"
	"github.com/tributary-run/tributary/queue"
)

type testBundle struct {
	db     *pgtest.DB
	client *queue.Client
	stager *Stager
	sink   *BlobSink
	worker *FlushWorker
}

type setupOpts struct {
	streams    Config
	sinkURL    string
	wrap       func(Sink) Sink // wraps the sink the worker uses
	interval   time.Duration
	noWorker   bool
	maxBatches int
}

func setup(t *testing.T, o setupOpts) *testBundle {
	t.Helper()
	db := pgtest.New(t)
	client := db.Client(t)
	stager, err := NewStager(client, o.streams)
	require.NoError(t, err)
	if o.sinkURL == "" {
		o.sinkURL = "file://" + filepath.Join(t.TempDir(), "batches")
	}
	sink, err := OpenSink(context.Background(), o.sinkURL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sink.Close() })
	b := &testBundle{db: db, client: client, stager: stager, sink: sink}
	if o.noWorker {
		return b
	}
	var workerSink Sink = sink
	if o.wrap != nil {
		workerSink = o.wrap(sink)
	}
	pgtest.StartRuntime(t, db, queue.RuntimeConfig{}, func(rt *queue.Runtime) {
		b.worker, err = Register(rt, FlusherConfig{
			Streams:   o.streams,
			Sink:      workerSink,
			Prefix:    sink.Prefix(),
			RetryBase: 20 * time.Millisecond,
			RetryMax:  200 * time.Millisecond,

			MaxBatchesPerJob: o.maxBatches,
		}, AgeTimerConfig{Interval: cmpDur(o.interval, time.Hour)})
		require.NoError(t, err)
	})
	return b
}

func cmpDur(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

func item(stream string, i int) []byte {
	return []byte(fmt.Sprintf(`{"stream":%q,"n":%d,"pad":"%s"}`, stream, i, "xxxxxxxxxxxxxxxx"))
}

// stageEach stages items n..m-1 each in its own transaction.
func (b *testBundle) stageEach(t *testing.T, stream string, from, to int) {
	t.Helper()
	for i := from; i < to; i++ {
		require.NoError(t, b.stager.Stage(context.Background(), stream, item(stream, i)))
	}
}

func (b *testBundle) stagedCount(t *testing.T, stream string) int {
	t.Helper()
	var n int
	require.NoError(t, b.db.Pool.QueryRow(context.Background(), b.db.Q(`SELECT coalesce(sum(item_count - done_items), 0) FROM /*schema*/tributary_batch_chunk WHERE stream = $1`), stream).Scan(&n))
	return n
}

func (b *testBundle) writtenItems(t *testing.T, stream string) int {
	t.Helper()
	var n int
	require.NoError(t, b.db.Pool.QueryRow(context.Background(), b.db.Q(`SELECT coalesce(sum(item_count), 0) FROM /*schema*/tributary_batch_object WHERE stream = $1 AND status = 'written'`), stream).Scan(&n))
	return n
}

func (b *testBundle) waitWritten(t *testing.T, stream string, n int, timeout time.Duration) {
	t.Helper()
	// Tests share one small pool and two cores with every other package's
	// tests; the timeout is generous and only matters when something hangs.
	timeout = max(timeout, time.Minute)
	deadline := time.Now().Add(timeout)
	for b.writtenItems(t, stream) < n {
		if time.Now().After(deadline) {
			b.dumpState(t)
			t.Fatalf("timed out after %s waiting for %d items of %s written (%d are)", timeout, n, stream, b.writtenItems(t, stream))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// dumpState logs the flush jobs, objects and staged items, to explain a
// timeout.
func (b *testBundle) dumpState(t *testing.T) {
	t.Helper()
	b.db.LogRows(t,
		`SELECT id, state, attempt, args::text, coalesce(errors::text, '') FROM /*schema*/river_job ORDER BY id`,
		`SELECT id, stream, status, first_item_id, last_item_id, item_count, claimed_by_job FROM /*schema*/tributary_batch_object ORDER BY id`,
		`SELECT stream, count(*), sum(item_count - done_items), min(id), max(id) FROM /*schema*/tributary_batch_chunk GROUP BY stream`)
}

// checkExactlyOnce decodes every object in the sink and requires that the
// items 0..n-1 of stream appear exactly once each, and that the objects in
// the sink and the written rows agree.
func (b *testBundle) checkExactlyOnce(t *testing.T, stream string, n int) map[string][]string {
	t.Helper()
	objs := readObjects(t, b.sink.Bucket())
	seen := map[int]int{}
	for key, lines := range objs {
		for _, l := range lines {
			var v struct {
				Stream string `json:"stream"`
				N      int    `json:"n"`
			}
			require.NoError(t, json.Unmarshal([]byte(l), &v), "line %q of %s", l, key)
			if v.Stream == stream {
				seen[v.N]++
			}
		}
	}
	for i := 0; i < n; i++ {
		require.Equal(t, 1, seen[i], "item %d of %s appears %d times", i, stream, seen[i])
	}
	require.Len(t, seen, n)

	rows, err := b.db.Pool.Query(context.Background(), b.db.Q(`SELECT key, item_count FROM /*schema*/tributary_batch_object WHERE stream = $1 AND status = 'written'`), stream)
	require.NoError(t, err)
	recorded := map[string]int{}
	for rows.Next() {
		var key string
		var count int
		require.NoError(t, rows.Scan(&key, &count))
		recorded[key] = count
	}
	require.NoError(t, rows.Err())
	for key, lines := range objs {
		if len(lines) > 0 && json.Valid([]byte(lines[0])) {
			var v struct{ Stream string }
			_ = json.Unmarshal([]byte(lines[0]), &v)
			if v.Stream != stream {
				continue
			}
		}
		require.Contains(t, recorded, key, "object %s in the sink has no record", key)
		require.Equal(t, len(lines), recorded[key], "items of %s", key)
	}
	return objs
}

var keyRE = regexp.MustCompile(`^(p/)?([A-Za-z0-9._-]+)/dt=\d{4}-\d{2}-\d{2}/hour=\d{2}/[0-9a-f-]{36}\.jsonl\.gz$`)

func TestFlushCountTrigger(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{streams: Config{Defaults: StreamConfig{MaxEvents: 5, MaxBytes: 1 << 20, MaxAge: time.Hour}}})
	b.stageEach(t, "orders", 0, 12)
	b.waitWritten(t, "orders", 10, 20*time.Second)
	require.Equal(t, 2, b.stagedCount(t, "orders"), "the last 2 items wait for the next trigger")
	objs := b.checkExactlyOnce(t, "orders", 10)
	require.Len(t, objs, 2)
	for key, lines := range objs {
		require.Regexp(t, keyRE, key)
		require.Len(t, lines, 5)
	}
}

func TestFlushBytesTrigger(t *testing.T) {
	t.Parallel()
	one := int64(len(item("clicks", 0)))
	b := setup(t, setupOpts{streams: Config{Defaults: StreamConfig{MaxEvents: 1000, MaxBytes: 3*one + 2, MaxAge: time.Hour}}})
	// A stream is full by bytes once it holds at least MaxBytes; objects
	// never hold more than MaxBytes, so 10 items make 3 objects of 3.
	b.stageEach(t, "clicks", 0, 10)
	b.waitWritten(t, "clicks", 9, 20*time.Second)
	require.Equal(t, 1, b.stagedCount(t, "clicks"))
	objs := b.checkExactlyOnce(t, "clicks", 9)
	require.Len(t, objs, 3)
	for _, lines := range objs {
		require.Len(t, lines, 3, "3 items fill max bytes")
	}
}

func TestFlushAgeTrigger(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{
		streams:  Config{Defaults: StreamConfig{MaxEvents: 1000, MaxBytes: 1 << 20, MaxAge: 300 * time.Millisecond}},
		interval: 50 * time.Millisecond,
	})
	b.stageEach(t, "slow", 0, 3)
	b.waitWritten(t, "slow", 3, 20*time.Second)
	objs := b.checkExactlyOnce(t, "slow", 3)
	require.Len(t, objs, 1)
	var oldest, written time.Time
	require.NoError(t, b.db.Pool.QueryRow(context.Background(), b.db.Q(`SELECT first_item_at, written_at FROM /*schema*/tributary_batch_object`)).Scan(&oldest, &written))
	require.GreaterOrEqual(t, written.Sub(oldest), 300*time.Millisecond, "flushed only once the oldest item was max age old")
}

func TestFlushPerStreamSettingsAndPrefix(t *testing.T) {
	t.Parallel()
	srv := startS3(t)
	b := setup(t, setupOpts{
		sinkURL: srv.url("p"),
		streams: Config{
			Defaults: StreamConfig{MaxEvents: 100, MaxAge: time.Hour},
			Streams:  map[string]StreamConfig{"small": {MaxEvents: 2}},
		},
	})
	b.stageEach(t, "small", 0, 4)
	b.stageEach(t, "big", 0, 4)
	b.waitWritten(t, "small", 4, 20*time.Second)
	objs := b.checkExactlyOnce(t, "small", 4)
	require.Len(t, objs, 2)
	for key := range objs {
		require.Regexp(t, keyRE, key)
		require.Regexp(t, `^p/small/`, key)
	}
	require.Equal(t, 4, b.stagedCount(t, "big"))
}

func TestStageValidation(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{streams: Config{Defaults: StreamConfig{MaxBytes: 50}}, noWorker: true})
	ctx := context.Background()

	err := b.stager.Stage(ctx, "s", []byte(`{"ok":1}`), []byte(`{"broken":`))
	var inv *InvalidItemError
	require.ErrorAs(t, err, &inv)
	require.Equal(t, 1, inv.Index)
	require.ErrorIs(t, err, ErrInvalidItem)

	big := []byte(`{"x":"` + string(make([]byte, 60)) + `"}`)
	for i := range big[6 : len(big)-2] {
		big[6+i] = 'a'
	}
	err = b.stager.Stage(ctx, "s", []byte(`{"ok":1}`), big)
	var tooLarge *ItemTooLargeError
	require.ErrorAs(t, err, &tooLarge)
	require.ErrorIs(t, err, ErrItemTooLarge)
	require.Equal(t, len(big), tooLarge.Size)
	require.Contains(t, err.Error(), `stream "s"`)
	require.Contains(t, err.Error(), "max bytes 50")

	err = b.stager.Stage(ctx, "bad/stream", []byte(`1`))
	require.ErrorContains(t, err, `"bad/stream"`)

	require.Equal(t, 0, b.stagedCount(t, "s"), "a refused call writes nothing")

	// Line breaks are white space in JSON: the stored line has none.
	require.NoError(t, b.stager.Stage(ctx, "s", []byte("{\n  \"a\": [1,\n 2]\n}")))
	staged, err := ReadStaged(ctx, b.db.Pool, b.db.Schema, "s", 10)
	require.NoError(t, err)
	require.Equal(t, []string{`{"a":[1,2]}`}, toStrings(staged))
}

func TestStageRollbackStagesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{streams: Config{Defaults: StreamConfig{MaxEvents: 1}}, noWorker: true})
	ctx := context.Background()
	tx, err := b.db.Pool.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, b.stager.StageManyTx(ctx, tx, "r", [][]byte{[]byte(`1`), []byte(`2`)}))
	require.NoError(t, tx.Rollback(ctx))
	require.Equal(t, 0, b.stagedCount(t, "r"))
	require.Equal(t, 0, b.db.CountJobs(t), "the flush job rolled back with the items")

	require.NoError(t, b.stager.Stage(ctx, "r", []byte(`1`)))
	require.Equal(t, 1, b.db.CountJobs(t, rivertype.JobStateAvailable))
	// A burst enqueues one flush job per stream, not one per call.
	for i := 0; i < 20; i++ {
		require.NoError(t, b.stager.Stage(ctx, "r", []byte(`1`)))
	}
	require.Equal(t, 1, b.db.CountJobs(t))
}

// TestOversizeItemNeverBlocksStream: an item larger than max bytes is
// refused at staging; one staged before the limit was lowered gets an
// object of its own and the stream goes on.
func TestOversizeItemNeverBlocksStream(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	client := db.Client(t)
	ctx := context.Background()
	generous, err := NewStager(client, Config{Defaults: StreamConfig{MaxBytes: 1 << 20}})
	require.NoError(t, err)
	bigPayload := []byte(`{"stream":"s","n":0,"pad":"` + string(repeat('b', 500)) + `"}`)
	require.NoError(t, generous.Stage(ctx, "s", bigPayload))
	for i := 1; i < 5; i++ {
		require.NoError(t, generous.Stage(ctx, "s", item("s", i)))
	}

	strict := Config{Defaults: StreamConfig{MaxEvents: 1000, MaxBytes: 200, MaxAge: time.Millisecond}}
	sink, err := OpenSink(ctx, "file://"+filepath.Join(t.TempDir(), "b"))
	require.NoError(t, err)
	pgtest.StartRuntime(t, db, queue.RuntimeConfig{}, func(rt *queue.Runtime) {
		_, err := Register(rt, FlusherConfig{Streams: strict, Sink: sink}, AgeTimerConfig{Interval: 50 * time.Millisecond})
		require.NoError(t, err)
	})
	b := &testBundle{db: db, client: client, sink: sink}
	b.waitWritten(t, "s", 5, 20*time.Second)
	objs := b.checkExactlyOnce(t, "s", 5)
	sizes := []int{}
	for _, lines := range objs {
		sizes = append(sizes, len(lines))
	}
	sort.Ints(sizes)
	require.Equal(t, 1, sizes[0], "the oversize item has an object of its own")

	strictStager, err := NewStager(client, strict)
	require.NoError(t, err)
	require.ErrorIs(t, strictStager.Stage(ctx, "s", bigPayload), ErrItemTooLarge)
}

func repeat(c byte, n int) []byte {
	out := make([]byte, n)
	for i := range out {
		out[i] = c
	}
	return out
}

// crashAfterUpload writes the object, then fails like a worker killed
// between the upload and the commit: on the first write of each of the
// first `times` keys.
type crashAfterUpload struct {
	Sink
	mu     sync.Mutex
	times  int
	writes map[string]int
}

var errCrash = errors.New("simulated crash after the upload")

func (c *crashAfterUpload) Write(ctx context.Context, key string, r io.Reader) error {
	if err := c.Sink.Write(ctx, key, r); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.writes[key]++
	if c.writes[key] == 1 && c.times > 0 {
		c.times--
		return errCrash
	}
	return nil
}

// TestFlushExactlyOnceAcrossCrash: a flush that dies after its object was
// uploaded and before the commit is retried, writes the same key again, and
// every item is in exactly one object.
func TestFlushExactlyOnceAcrossCrash(t *testing.T) {
	t.Parallel()
	crash := &crashAfterUpload{times: 3, writes: map[string]int{}}
	b := setup(t, setupOpts{
		streams: Config{Defaults: StreamConfig{MaxEvents: 10, MaxAge: time.Hour}},
		wrap:    func(s Sink) Sink { crash.Sink = s; return crash },
	})
	ctx := context.Background()
	// Chunks of 7 items: most objects end inside a chunk.
	const n = 95
	for i := 0; i < n; i += 7 {
		payloads := [][]byte{}
		for j := i; j < i+7 && j < n; j++ {
			payloads = append(payloads, item("events", j))
		}
		require.NoError(t, b.stager.Stage(ctx, "events", payloads...))
	}
	b.waitWritten(t, "events", 90, 30*time.Second)
	objs := b.checkExactlyOnce(t, "events", 90)
	require.Len(t, objs, 9)
	rewritten := 0
	crash.mu.Lock()
	for key, n := range crash.writes {
		require.Contains(t, objs, key, "every write went to a recorded key")
		if n > 1 {
			rewritten++
		}
	}
	crash.mu.Unlock()
	require.Equal(t, 3, rewritten, "each crashed flush rewrote its own key once")
	require.Equal(t, 5, b.stagedCount(t, "events"))
}

// TestFlushSinkDownRetriesAndCatchesUp: with the S3 server stopped, flush
// jobs fail and retry with backoff, the items stay staged, and everything
// is written once the server is back.
func TestFlushSinkDownRetriesAndCatchesUp(t *testing.T) {
	t.Parallel()
	srv := startS3(t)
	b := setup(t, setupOpts{
		sinkURL: srv.url(""),
		streams: Config{Defaults: StreamConfig{MaxEvents: 10, MaxAge: time.Hour}},
	})
	srv.stop()
	ctx := context.Background()
	const n = 40
	for i := 0; i < n; i += 10 {
		payloads := [][]byte{}
		for j := i; j < i+10; j++ {
			payloads = append(payloads, item("down", j))
		}
		require.NoError(t, b.stager.Stage(ctx, "down", payloads...))
	}
	var jobID int64
	pgtest.WaitFor(t, 30*time.Second, "the flush job to fail twice", func() (bool, error) {
		var attempts int
		err := b.db.Pool.QueryRow(ctx, b.db.Q(`SELECT id, attempt FROM /*schema*/river_job WHERE kind = 'batch.flush' AND state IN ('retryable', 'available', 'running') ORDER BY id LIMIT 1`)).Scan(&jobID, &attempts)
		if errors.Is(err, pgx.ErrNoRows) {
			return false, nil
		}
		return attempts >= 3, err
	})
	require.Equal(t, n, b.stagedCount(t, "down"), "items stay staged while the sink is down")
	require.Equal(t, 0, b.writtenItems(t, "down"))
	var errs []byte
	require.NoError(t, b.db.Pool.QueryRow(ctx, b.db.Q(`SELECT errors::text FROM /*schema*/river_job WHERE id = $1`), jobID).Scan(&errs))
	require.Contains(t, string(errs), "error writing object")

	srv.restart(t)
	b.waitWritten(t, "down", n, 30*time.Second)
	b.checkExactlyOnce(t, "down", n)
	require.Equal(t, 0, b.stagedCount(t, "down"))
}

// lateItemSink reads the whole object, then commits an item with an id
// inside the batch's range (as a producer whose transaction took its id
// earlier but committed later would), then stores the object.
type lateItemSink struct {
	Sink
	db     *pgtest.DB
	mu     sync.Mutex
	writes map[string]int
	done   bool
}

func (s *lateItemSink) Write(ctx context.Context, key string, r io.Reader) error {
	data, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.writes[key]++
	if !s.done {
		s.done = true
		_, err = s.db.Pool.Exec(ctx, s.db.Q(`INSERT INTO /*schema*/tributary_batch_chunk (id, stream, payload, byte_size, created_at)
			OVERRIDING SYSTEM VALUE VALUES (2, 'a', $1, $2, now())`), item("a", 99), len(item("a", 99)))
	}
	s.mu.Unlock()
	if err != nil {
		return err
	}
	return s.Sink.Write(ctx, key, bytes.NewReader(data))
}

// TestFlushLateItemInRange: an item that commits inside a batch's id range
// after the object was read is not deleted unwritten: it stays staged and
// goes into the next object, once.
func TestFlushLateItemInRange(t *testing.T) {
	t.Parallel()
	var late *lateItemSink
	db := pgtest.New(t)
	ctx := context.Background()
	streams := Config{Defaults: StreamConfig{MaxEvents: 2, MaxAge: time.Hour}}
	stager, err := NewStager(db.Client(t), streams)
	require.NoError(t, err)
	// Ids 1 (a), 2 (b, rolled back: a gap inside a's range), 3 (a).
	require.NoError(t, stager.Stage(ctx, "a", item("a", 0)))
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, stager.StageTx(ctx, tx, "b", item("b", 0)))
	require.NoError(t, tx.Rollback(ctx))
	require.NoError(t, stager.Stage(ctx, "a", item("a", 1)))

	sink, err := OpenSink(ctx, "file://"+filepath.Join(t.TempDir(), "late"))
	require.NoError(t, err)
	late = &lateItemSink{Sink: sink, db: db, writes: map[string]int{}}
	pgtest.StartRuntime(t, db, queue.RuntimeConfig{}, func(rt *queue.Runtime) {
		_, err := Register(rt, FlusherConfig{Streams: streams, Sink: late}, AgeTimerConfig{Interval: time.Hour})
		require.NoError(t, err)
	})
	b := &testBundle{db: db, sink: sink}
	b.waitWritten(t, "a", 2, 20*time.Second)
	staged, err := ReadStaged(ctx, db.Pool, db.Schema, "a", 10)
	require.NoError(t, err)
	require.Equal(t, []string{string(item("a", 99))}, toStrings(staged), "the late item is still staged")

	require.NoError(t, stager.Stage(ctx, "a", item("a", 2)))
	b.waitWritten(t, "a", 4, 20*time.Second)
	objs := readObjects(t, sink.Bucket())
	require.Len(t, objs, 2)
	seen := map[string]int{}
	for key, lines := range objs {
		require.Len(t, lines, 2)
		require.Equal(t, 1, late.writes[key], "each key was written once")
		for _, l := range lines {
			seen[l]++
		}
	}
	for _, n := range []int{0, 1, 2, 99} {
		require.Equal(t, 1, seen[string(item("a", n))], "item %d", n)
	}
	require.Equal(t, 0, b.stagedCount(t, "a"))
}

func toStrings(bs [][]byte) []string {
	out := make([]string, len(bs))
	for i, b := range bs {
		out[i] = string(b)
	}
	return out
}

// TestFlushBacklogChainsJobs: a backlog larger than one job's share is
// drained by successor jobs, each enqueued in its predecessor's completing
// transaction.
func TestFlushBacklogChainsJobs(t *testing.T) {
	t.Parallel()
	b := setup(t, setupOpts{
		streams:    Config{Defaults: StreamConfig{MaxEvents: 2, MaxAge: time.Hour}},
		maxBatches: 2,
		noWorker:   true,
	})
	ctx := context.Background()
	var payloads [][]byte
	for i := range 11 {
		payloads = append(payloads, item("chain", i))
	}
	require.NoError(t, b.stager.Stage(ctx, "chain", payloads...))
	pgtest.StartRuntime(t, b.db, queue.RuntimeConfig{}, func(rt *queue.Runtime) {
		_, err := Register(rt, FlusherConfig{Streams: Config{Defaults: StreamConfig{MaxEvents: 2, MaxAge: time.Hour}}, Sink: b.sink, MaxBatchesPerJob: 2},
			AgeTimerConfig{Interval: time.Hour})
		require.NoError(t, err)
	})
	b.waitWritten(t, "chain", 10, 20*time.Second)
	b.checkExactlyOnce(t, "chain", 10)
	pgtest.WaitFor(t, 20*time.Second, "3 completed flush jobs", func() (bool, error) {
		return b.db.CountJobs(t, rivertype.JobStateCompleted) == 3, nil
	})
	require.Equal(t, 1, b.stagedCount(t, "chain"))
}

func TestServiceContract(t *testing.T) {
	t.Parallel()
	servicetest.Run(t, "batch.AgeTimer", func(t *testing.T) (queue.Service, error) {
		return NewAgeTimer(pgtest.New(t).Client(t), AgeTimerConfig{Interval: time.Hour, Logger: pgtest.Logger(t)})
	})
}
