package batch

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tributary-run/tributary/queue"
)

// ChunkMaxBytesDefault bounds the payload of one staged chunk (a row of
// tributary_batch_chunk): a staging call of more is split into several
// chunks. A flush reads a chunk whole, so this bounds the flush's memory
// per row; a stream's MaxBytes and MaxEvents bound a chunk too, so a chunk
// never holds more than one object.
const ChunkMaxBytesDefault = 1 << 20

// Stager stages items for batch flushes in the caller's transactions. It is
// safe for concurrent use; create one per process and share it.
type Stager struct {
	client *queue.Client
	cfg    Config

	mu     sync.Mutex
	tally  map[string]*tally
	staged atomic.Uint64
	bytes  atomic.Uint64
}

// tally is what this process staged into a stream since it last measured
// the stream; it decides when the next measurement is worth its cost.
type tally struct {
	events int
	bytes  int64
	// seenEvents, seenBytes and seenChunks are never reset: the average
	// sizes of items and chunks bound how much of the stream a measurement
	// reads.
	seenEvents int64
	seenBytes  int64
	seenChunks int64
}

// NewStager returns a stager that enqueues flush jobs through client.
func NewStager(client *queue.Client, cfg Config) (*Stager, error) {
	if client == nil {
		return nil, fmt.Errorf("batch stager needs a client")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Stager{client: client, cfg: cfg, tally: map[string]*tally{}}, nil
}

// Config returns the stager's stream configuration.
func (s *Stager) Config() Config { return s.cfg }

// StageTx stages one item in tx. See StageManyTx.
func (s *Stager) StageTx(ctx context.Context, tx pgx.Tx, stream string, payload []byte) error {
	return s.StageManyTx(ctx, tx, stream, [][]byte{payload})
}

// StageManyTx stages items in tx: each payload is one JSON value and
// becomes one line of an object. If tx rolls back, nothing was staged. A bad
// stream name, an invalid payload or a payload larger than the stream's
// MaxBytes fails the whole call (before anything is written) with an error
// naming it.
//
// The items are stored as chunks, one row per call (more when the call
// holds more than MaxEvents items or min(MaxBytes, ChunkMaxBytesDefault)
// bytes), which costs Postgres far less per item than a row each.
//
// When the stream has reached its count or byte threshold, a flush job for
// it is enqueued in the same transaction (skipped when one is already
// queued or running). Measuring a stream costs an index scan of up to
// MaxEvents chunks, so it runs once this process has staged half a
// threshold into the stream since the last measurement; the age timer also
// measures every stream, so a missed threshold is caught within its
// interval.
func (s *Stager) StageManyTx(ctx context.Context, tx pgx.Tx, stream string, payloads [][]byte) error {
	if len(payloads) == 0 {
		return nil
	}
	if err := ValidateStream(stream); err != nil {
		return err
	}
	sc := s.cfg.For(stream)
	lines, sizes, total, err := prepare(stream, payloads, sc.MaxBytes)
	if err != nil {
		return err
	}
	now := time.Now().UTC()
	schema := s.client.Schema()
	chunks, counts, chunkBytes := chunkLines(lines, sizes, sc)
	if len(chunks) == 1 {
		_, err = tx.Exec(ctx, queue.Qualify(schema, insertChunkSQL), stream, chunks[0], chunkBytes[0], counts[0], now)
	} else {
		_, err = tx.Exec(ctx, queue.Qualify(schema, insertChunksSQL), stream, now, chunks, chunkBytes, counts)
	}
	if err != nil {
		return fmt.Errorf("error staging %d items into stream %q: %w", len(lines), stream, err)
	}
	s.staged.Add(uint64(len(lines)))
	s.bytes.Add(uint64(total))

	measure, avg := s.shouldMeasure(stream, len(lines), len(chunks), total, sc)
	if !measure {
		return nil
	}
	h, err := measureHeadFor(ctx, tx, schema, stream, sc, avg)
	if err != nil {
		return err
	}
	if !h.due(sc, now) {
		return nil
	}
	if err := enqueueFlushTx(ctx, s.client, tx, stream); err != nil {
		return err
	}
	return nil
}

// Stage stages items in a transaction of its own on the client's pool.
func (s *Stager) Stage(ctx context.Context, stream string, payloads ...[]byte) error {
	return pgx.BeginFunc(ctx, s.client.Pool(), func(tx pgx.Tx) error {
		return s.StageManyTx(ctx, tx, stream, payloads)
	})
}

// Staged returns how many items and payload bytes this stager staged
// (including calls whose transaction later rolled back).
func (s *Stager) Staged() (items, bytes uint64) { return s.staged.Load(), s.bytes.Load() }

// shouldMeasure counts a staging call and says whether to measure the
// stream now, with the average sizes seen so far.
func (s *Stager) shouldMeasure(stream string, events, chunks int, bytes int64, sc StreamConfig) (bool, avgSizes) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.tally[stream]
	if t == nil {
		t = &tally{}
		s.tally[stream] = t
	}
	t.events += events
	t.bytes += bytes
	t.seenEvents += int64(events)
	t.seenBytes += bytes
	t.seenChunks += int64(chunks)
	if t.events >= max(1, sc.MaxEvents/2) || t.bytes >= max(1, sc.MaxBytes/2) {
		t.events, t.bytes = 0, 0
		return true, avgSizes{item: float64(t.seenBytes) / float64(t.seenEvents), chunk: float64(t.seenEvents) / float64(t.seenChunks)}
	}
	return false, avgSizes{}
}

// chunkLines groups lines into chunks (payloads of lines joined by
// newlines), in order, each of at most MaxEvents items and at most
// min(MaxBytes, ChunkMaxBytesDefault) payload bytes, but at least one item.
func chunkLines(lines [][]byte, sizes []int32, sc StreamConfig) (chunks [][]byte, counts, chunkBytes []int32) {
	limit := min(sc.MaxBytes, ChunkMaxBytesDefault)
	for i := 0; i < len(lines); {
		j, b := i, int64(0)
		for j < len(lines) && (j == i || (j-i < sc.MaxEvents && b+int64(sizes[j]) <= limit)) {
			b += int64(sizes[j])
			j++
		}
		buf := make([]byte, 0, int(b)+j-i-1)
		for k := i; k < j; k++ {
			if k > i {
				buf = append(buf, '\n')
			}
			buf = append(buf, lines[k]...)
		}
		chunks = append(chunks, buf)
		counts = append(counts, int32(j-i))
		chunkBytes = append(chunkBytes, int32(b))
		i = j
	}
	return chunks, counts, chunkBytes
}

// prepare validates payloads and turns each into one line: valid JSON
// without raw line breaks (JSON strings cannot hold raw line breaks, so any
// is white space and compacting removes it).
func prepare(stream string, payloads [][]byte, maxBytes int64) (lines [][]byte, sizes []int32, total int64, err error) {
	lines = make([][]byte, len(payloads))
	sizes = make([]int32, len(payloads))
	for i, p := range payloads {
		if !json.Valid(p) {
			reason := "not a JSON value"
			var v any
			if uerr := json.Unmarshal(p, &v); uerr != nil {
				reason = uerr.Error()
			}
			return nil, nil, 0, &InvalidItemError{Stream: stream, Index: i, Reason: reason}
		}
		line := p
		if bytes.ContainsAny(p, "\r\n") {
			var buf bytes.Buffer
			if err := json.Compact(&buf, p); err != nil {
				return nil, nil, 0, &InvalidItemError{Stream: stream, Index: i, Reason: err.Error()}
			}
			line = buf.Bytes()
		}
		if int64(len(line)) > maxBytes {
			return nil, nil, 0, &ItemTooLargeError{Stream: stream, Index: i, Size: len(line), MaxBytes: maxBytes}
		}
		lines[i] = line
		sizes[i] = int32(len(line))
		total += int64(len(line))
	}
	return lines, sizes, total, nil
}

// head is the measured front of a stream.
type head struct {
	events int
	bytes  int64
	chunks int // chunks read to measure it
	oldest time.Time
}

// avgSizes are the average item size (bytes) and items per chunk of a
// stream, as last seen; they bound how far a measurement reads.
type avgSizes struct {
	item  float64
	chunk float64
}

// due reports whether the stream needs a flush: full by count or bytes, or
// its oldest item is older than MaxAge.
func (h head) due(sc StreamConfig, now time.Time) bool {
	if h.events == 0 {
		return false
	}
	return h.events >= sc.MaxEvents || h.bytes >= sc.MaxBytes || now.Sub(h.oldest) >= sc.MaxAge
}

// headLimit is how many chunks a measurement reads: enough for MaxEvents
// items, unless the average item size says MaxBytes is reached long before
// (objects bounded by bytes, with a large MaxEvents), at the average chunk
// size; never more than MaxEvents, as every chunk holds at least one item.
func headLimit(sc StreamConfig, avg avgSizes) int {
	items := float64(sc.MaxEvents)
	if avg.item > 0 {
		items = min(items, 2*float64(sc.MaxBytes)/avg.item+64)
	}
	if avg.chunk > 1 {
		items = items/avg.chunk + 64
	}
	return int(min(float64(sc.MaxEvents), items))
}

// conclusive reports whether a measurement of limit chunks decided
// fullness; if not (the items or chunks were smaller than estimated), read
// MaxEvents chunks.
func (h head) conclusive(sc StreamConfig, limit int) bool {
	return h.chunks < limit || limit >= sc.MaxEvents || h.events >= sc.MaxEvents || h.bytes >= sc.MaxBytes
}

// measureHeadFor measures the head of a stream, reading only as far as
// needed given the average sizes.
func measureHeadFor(ctx context.Context, db queue.DBTX, schema, stream string, sc StreamConfig, avg avgSizes) (head, error) {
	limit := headLimit(sc, avg)
	h, err := measureHead(ctx, db, schema, stream, limit)
	if err != nil || h.conclusive(sc, limit) {
		return h, err
	}
	return measureHead(ctx, db, schema, stream, sc.MaxEvents)
}

func measureHead(ctx context.Context, db queue.DBTX, schema, stream string, limit int) (head, error) {
	var h head
	var oldest *time.Time
	if err := queryHead(ctx, db, queue.Qualify(schema, dueSQL), []any{stream, limit}, &h.events, &h.bytes, &h.chunks, &oldest); err != nil {
		return head{}, fmt.Errorf("error measuring stream %q: %w", stream, err)
	}
	if oldest != nil {
		h.oldest = *oldest
	}
	return h, nil
}
