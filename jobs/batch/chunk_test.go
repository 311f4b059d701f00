package batch

import (
	"context"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/migrations"
	"github.com/tributary-run/tributary/queue"
)

func TestChunkLines(t *testing.T) {
	t.Parallel()
	lines := [][]byte{[]byte(`1`), []byte(`22`), []byte(`333`), []byte(`4444`), []byte(`55555`)}
	sizes := []int32{1, 2, 3, 4, 5}
	for name, tc := range map[string]struct {
		sc     StreamConfig
		chunks []string
		counts []int32
		bytes  []int32
	}{
		"one chunk": {StreamConfig{MaxEvents: 100, MaxBytes: 100}, []string{"1\n22\n333\n4444\n55555"}, []int32{5}, []int32{15}},
		"by count":  {StreamConfig{MaxEvents: 2, MaxBytes: 100}, []string{"1\n22", "333\n4444", "55555"}, []int32{2, 2, 1}, []int32{3, 7, 5}},
		// Bytes count the items, not the newlines between them.
		"by bytes": {StreamConfig{MaxEvents: 100, MaxBytes: 6}, []string{"1\n22\n333", "4444", "55555"}, []int32{3, 1, 1}, []int32{6, 4, 5}},
		// An item over the limit (staged before it was lowered) is a chunk
		// of its own.
		"oversize": {StreamConfig{MaxEvents: 100, MaxBytes: 2}, []string{"1", "22", "333", "4444", "55555"}, []int32{1, 1, 1, 1, 1}, []int32{1, 2, 3, 4, 5}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			chunks, counts, bytes := chunkLines(lines, sizes, tc.sc)
			require.Equal(t, tc.chunks, toStrings(chunks))
			require.Equal(t, tc.counts, counts)
			require.Equal(t, tc.bytes, bytes)
		})
	}

	// ChunkMaxBytesDefault bounds a chunk whatever the stream allows.
	big := make([][]byte, 3)
	bigSizes := make([]int32, 3)
	for i := range big {
		big[i] = []byte(`"` + strings.Repeat("x", ChunkMaxBytesDefault/2-2) + `"`)
		bigSizes[i] = int32(len(big[i]))
	}
	chunks, counts, _ := chunkLines(big, bigSizes, StreamConfig{MaxEvents: 100, MaxBytes: 1 << 30})
	require.Len(t, chunks, 2)
	require.Equal(t, []int32{2, 1}, counts)
}

// TestFlushPartialChunks: objects end inside chunks, by count and by bytes;
// the rest of each chunk goes into the next object, nothing lost or
// written twice, and no object is over a limit.
func TestFlushPartialChunks(t *testing.T) {
	t.Parallel()
	one := int64(len(item("bytes", 0))) // every item of a stream below has this size
	for name, sc := range map[string]StreamConfig{
		"count": {MaxEvents: 7, MaxBytes: 1 << 20, MaxAge: time.Hour},
		"bytes": {MaxEvents: 1000, MaxBytes: 4*one + one/2, MaxAge: time.Hour},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, setupOpts{streams: Config{Defaults: sc}})
			ctx := context.Background()
			stream := name
			// Chunks of 5, 3, 5, 3, ... items: 41 in all.
			const n = 41
			for i, size := 0, 5; i < n; i, size = i+size, 8-size {
				var payloads [][]byte
				for j := i; j < min(i+size, n); j++ {
					payloads = append(payloads, item(stream, j))
				}
				require.NoError(t, b.stager.Stage(ctx, stream, payloads...))
			}
			per := min(sc.MaxEvents, int(sc.MaxBytes/one))
			full := n / per * per
			b.waitWritten(t, stream, full, 20*time.Second)
			objs := b.checkExactlyOnce(t, stream, full)
			require.Len(t, objs, full/per)
			for key, lines := range objs {
				require.Len(t, lines, per, key)
			}
			staged, err := ReadStaged(ctx, b.db.Pool, b.db.Schema, stream, 100)
			require.NoError(t, err)
			var want []string
			for i := full; i < n; i++ {
				want = append(want, string(item(stream, i)))
			}
			require.Equal(t, want, toStrings(staged), "the rest of the last chunk is still staged")
		})
	}
}

// TestMigrationUpgradeFlushesOldItems: items staged one per row before
// migration 0015, and a batch claimed over them before it, are flushed
// after it, each once, together with items staged in chunks afterwards.
func TestMigrationUpgradeFlushesOldItems(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	m, err := migrations.New(db.Pool, migrations.Config{Schema: db.Schema})
	require.NoError(t, err)
	downThrough(t, m, 15)

	// The layout of migration 0004: one row per item, and a batch claimed
	// over ids 1..10 by a job that is gone.
	for i := range 25 {
		p := item("old", i)
		_, err := db.Pool.Exec(ctx, db.Q(`INSERT INTO /*schema*/tributary_batch_item (stream, payload, byte_size, created_at) VALUES ('old', $1, $2, now())`), p, len(p))
		require.NoError(t, err)
	}
	const claimedKey = "old/claimed-before-the-upgrade.jsonl.gz"
	_, err = db.Pool.Exec(ctx, db.Q(`INSERT INTO /*schema*/tributary_batch_object
		(batch_id, stream, key, status, first_item_id, last_item_id, item_count, bytes, compressed_bytes,
		 first_item_at, last_item_at, claimed_by_job, claimed_at)
		VALUES (gen_random_uuid(), 'old', $1, 'claimed', 1, 10, 10, 0, 0, now(), now(), 999999, now())`), claimedKey)
	require.NoError(t, err)

	_, err = m.Up(ctx)
	require.NoError(t, err)
	streams := Config{Defaults: StreamConfig{MaxEvents: 10, MaxAge: time.Hour}}
	client := db.Client(t)
	stager, err := NewStager(client, streams)
	require.NoError(t, err)
	var payloads [][]byte
	for i := 25; i < 37; i++ {
		payloads = append(payloads, item("old", i))
	}
	require.NoError(t, stager.Stage(ctx, "old", payloads...))

	sink, err := OpenSink(ctx, "file://"+filepath.Join(t.TempDir(), "b"))
	require.NoError(t, err)
	b := &testBundle{db: db, client: client, sink: sink}
	pgtest.StartRuntime(t, db, queue.RuntimeConfig{}, func(rt *queue.Runtime) {
		_, err := Register(rt, FlusherConfig{Streams: streams, Sink: b.sink}, AgeTimerConfig{Interval: time.Hour})
		require.NoError(t, err)
	})
	require.NoError(t, EnqueueFlush(ctx, client, "old"))
	b.waitWritten(t, "old", 30, 20*time.Second)
	objs := b.checkExactlyOnce(t, "old", 30)
	require.Len(t, objs, 3)
	require.Contains(t, objs, claimedKey, "the batch claimed before the upgrade was written under its key")
	require.Len(t, objs[claimedKey], 10)
	require.Equal(t, 7, b.stagedCount(t, "old"))
}

// TestMigrationDownSplitsChunks: rolling migration 0015 back turns every
// chunk into one row per item left in it.
func TestMigrationDownSplitsChunks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	stager, err := NewStager(db.Client(t), Config{})
	require.NoError(t, err)
	stage := func(from, to int) {
		var payloads [][]byte
		for i := from; i < to; i++ {
			payloads = append(payloads, item("down", i))
		}
		require.NoError(t, stager.Stage(ctx, "down", payloads...))
	}
	stage(0, 4)
	stage(4, 5)
	stage(5, 8)
	// Item 0 was written already: the object ended after it.
	_, err = db.Pool.Exec(ctx, db.Q(`UPDATE /*schema*/tributary_batch_chunk SET done_items = 1, done_bytes = $1 WHERE id = 1`), len(item("down", 0)))
	require.NoError(t, err)

	m, err := migrations.New(db.Pool, migrations.Config{Schema: db.Schema})
	require.NoError(t, err)
	downThrough(t, m, 15)
	rows, err := db.Pool.Query(ctx, db.Q(`SELECT payload, byte_size FROM /*schema*/tributary_batch_item ORDER BY id`))
	require.NoError(t, err)
	var got []string
	for rows.Next() {
		var p []byte
		var size int
		require.NoError(t, rows.Scan(&p, &size))
		require.Equal(t, len(p), size)
		got = append(got, string(p))
	}
	require.NoError(t, rows.Err())
	var want []string
	for _, i := range []int{4, 1, 2, 3, 5, 6, 7} { // the one-item chunk kept its id
		want = append(want, string(item("down", i)))
	}
	require.Equal(t, want, got)

	_, err = m.Up(ctx)
	require.NoError(t, err)
	staged, err := ReadStaged(ctx, db.Pool, db.Schema, "down", 100)
	require.NoError(t, err)
	require.Equal(t, want, toStrings(staged))
}

func TestReadStaged(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	_, err := ReadStaged(context.Background(), db.Pool, db.Schema, "bad/stream", 1)
	require.ErrorContains(t, err, `"bad/stream"`)
	_, err = ReadStaged(context.Background(), db.Pool, db.Schema, "s", 0)
	require.ErrorContains(t, err, "invalid limit 0")

	stager, err := NewStager(db.Client(t), Config{})
	require.NoError(t, err)
	require.NoError(t, stager.Stage(context.Background(), "s", []byte(`1`), []byte(`2`), []byte(`3`)))
	require.NoError(t, stager.Stage(context.Background(), "s", []byte(`4`)))
	staged, err := ReadStaged(context.Background(), db.Pool, db.Schema, "s", 2)
	require.NoError(t, err)
	require.Equal(t, []string{"1", "2"}, toStrings(staged))
	staged, err = ReadStaged(context.Background(), db.Pool, db.Schema, "s", 10)
	require.NoError(t, err)
	require.Equal(t, []string{"1", "2", "3", "4"}, toStrings(staged))
}

func TestLineWriterCutsChunks(t *testing.T) {
	t.Parallel()
	chunk := func(payload string, items int, size int64, doneItems int, doneBytes int64) *chunkRow {
		return &chunkRow{id: 7, payload: []byte(payload), items: items, byteSize: size, doneItems: doneItems, doneBytes: doneBytes}
	}
	for name, tc := range map[string]struct {
		ch       *chunkRow
		maxItems int
		maxBytes int64
		out      string
		full     bool
		cut      *chunkCut
	}{
		"whole":          {chunk("a\nbb\nccc", 3, 6, 0, 0), 10, 100, "a\nbb\nccc\n", true, nil},
		"by count":       {chunk("a\nbb\nccc", 3, 6, 0, 0), 2, 100, "a\nbb\n", false, &chunkCut{id: 7, doneItems: 2, doneBytes: 3}},
		"by bytes":       {chunk("a\nbb\nccc", 3, 6, 0, 0), 10, 2, "a\n", false, &chunkCut{id: 7, doneItems: 1, doneBytes: 1}},
		"the rest":       {chunk("a\nbb\nccc", 3, 6, 2, 3), 10, 100, "ccc\n", true, nil},
		"rest cut again": {chunk("a\nbb\nccc\ndddd", 4, 10, 1, 1), 1, 100, "bb\n", false, &chunkCut{id: 7, fromItems: 1, doneItems: 2, doneBytes: 3}},
		// An item over max bytes still makes an object of its own.
		"oversize first": {chunk("bb\nccc", 2, 5, 0, 0), 10, 1, "bb\n", false, &chunkCut{id: 7, doneItems: 1, doneBytes: 2}},
		"oversize last":  {chunk("bb\nccc", 2, 5, 1, 2), 10, 1, "ccc\n", true, nil},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var buf strings.Builder
			wr := &written{}
			lw := &lineWriter{zw: &buf, wr: wr, maxItems: tc.maxItems, maxBytes: tc.maxBytes}
			full, err := lw.chunk(tc.ch)
			require.NoError(t, err)
			require.Equal(t, tc.full, full)
			require.Equal(t, tc.out, buf.String())
			require.Equal(t, tc.cut, wr.partial)
			require.Equal(t, strings.Count(tc.out, "\n"), wr.items)
			require.Equal(t, int64(len(tc.out)-wr.items), wr.bytes)
		})
	}

	// A chunk that does not match its counts fails the flush instead of
	// writing what it does not know.
	for name, ch := range map[string]*chunkRow{
		"bytes":    chunk("a\nbb", 2, 4, 0, 0),
		"done":     chunk("a\nbb", 2, 3, 2, 3),
		"newlines": chunk("a\nb\nc", 2, 3, 0, 0),
	} {
		lw := &lineWriter{zw: io.Discard, wr: &written{}, maxItems: 10, maxBytes: 100}
		_, err := lw.chunk(ch)
		require.ErrorContains(t, err, "chunk 7 is inconsistent", name)
	}
}

// downThrough rolls migrations back, newest first, until it has rolled
// back version v (the later ones first, whatever they are).
func downThrough(t *testing.T, m *migrations.Migrator, v int) {
	t.Helper()
	for {
		res, err := m.Down(context.Background())
		require.NoError(t, err)
		require.NotEmpty(t, res.Steps, "nothing left to roll back before version %d", v)
		if res.Steps[0].Version <= v {
			require.Equal(t, v, res.Steps[0].Version)
			return
		}
	}
}
