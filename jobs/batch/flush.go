package batch

import (
	"bufio"
	"bytes"
	"cmp"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"path"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/tributary-run/tributary/internal/riverjob"
	"github.com/tributary-run/tributary/queue"
)

// Defaults for FlusherConfig.
const (
	FlushRetryBaseDefault        = time.Second
	FlushRetryMaxDefault         = 5 * time.Minute
	FlushMaxBatchesPerJobDefault = 20
	FlushJobTimeoutDefault       = 10 * time.Minute
	// CompressionLevelDefault is the gzip level of every object, written
	// by the flush worker or by SinkHandOff. BestSpeed: gzip is the largest
	// cost on the flush path, and level 6, measured there, takes 2.5 times
	// as long per item for objects of JSON with random letters only 0.7%
	// smaller.
	CompressionLevelDefault = gzip.BestSpeed
)

// FlusherConfig configures the flush worker.
type FlusherConfig struct {
	// Streams are the stream thresholds; give the stager the same.
	Streams Config

	// Sink receives the objects. Required.
	Sink Sink

	// Prefix is placed before the stream in every key:
	// {Prefix}/{stream}/dt=YYYY-MM-DD/hour=HH/{batch-id}.jsonl.gz.
	//
	// Defaults to the sink's Prefix() when it has one, else none.
	Prefix string

	// Logger receives a line per written object (debug) and per failure.
	//
	// Defaults to slog.Default().
	Logger *slog.Logger

	// RetryBase and RetryMax bound the backoff of a failed flush (a sink
	// that is down): min(RetryBase * 2^(attempt-1), RetryMax), plus up to
	// 10% jitter.
	//
	// Default to 1 second and 5 minutes.
	RetryBase time.Duration
	RetryMax  time.Duration

	// MaxBatchesPerJob bounds how many objects one job writes before it
	// completes and enqueues its successor, so a large backlog is drained by
	// a chain of short jobs.
	//
	// Defaults to 20.
	MaxBatchesPerJob int

	// JobTimeout bounds one flush job.
	//
	// Defaults to 10 minutes.
	JobTimeout time.Duration

	// CompressionLevel is the gzip level (gzip.BestSpeed to
	// gzip.BestCompression; gzip.DefaultCompression is level 6).
	//
	// Defaults to CompressionLevelDefault (gzip.BestSpeed).
	CompressionLevel int
}

// FlushWorker is the River worker of FlushArgs.
type FlushWorker struct {
	river.WorkerDefaults[FlushArgs]

	client *queue.Client
	cfg    FlusherConfig
	logger *slog.Logger

	mu    sync.Mutex
	sizes map[string]avgSizes // average sizes in each stream's last object

	objects atomic.Uint64
	items   atomic.Uint64
	bytes   atomic.Uint64
	failed  atomic.Uint64
}

// NewFlushWorker returns the flush worker; client gives it the pool, the
// schema and the enqueue of its successor jobs.
func NewFlushWorker(client *queue.Client, cfg FlusherConfig) (*FlushWorker, error) {
	if client == nil {
		return nil, errors.New("batch flush worker needs a client")
	}
	if cfg.Sink == nil {
		return nil, errors.New("batch flush worker needs a sink")
	}
	if err := cfg.Streams.Validate(); err != nil {
		return nil, err
	}
	if cfg.Prefix == "" {
		if p, ok := cfg.Sink.(interface{ Prefix() string }); ok {
			cfg.Prefix = p.Prefix()
		}
	}
	cfg.RetryBase = cmp.Or(cfg.RetryBase, FlushRetryBaseDefault)
	cfg.RetryMax = cmp.Or(cfg.RetryMax, FlushRetryMaxDefault)
	if cfg.RetryMax < cfg.RetryBase {
		return nil, fmt.Errorf("invalid flush retry max %s: smaller than retry base %s", cfg.RetryMax, cfg.RetryBase)
	}
	cfg.MaxBatchesPerJob = cmp.Or(cfg.MaxBatchesPerJob, FlushMaxBatchesPerJobDefault)
	cfg.JobTimeout = cmp.Or(cfg.JobTimeout, FlushJobTimeoutDefault)
	if cfg.CompressionLevel == 0 {
		cfg.CompressionLevel = CompressionLevelDefault
	}
	if _, err := gzip.NewWriterLevel(io.Discard, cfg.CompressionLevel); err != nil {
		return nil, fmt.Errorf("invalid gzip level %d: %w", cfg.CompressionLevel, err)
	}
	logger := cmp.Or(cfg.Logger, client.Logger())
	return &FlushWorker{client: client, cfg: cfg, logger: logger, sizes: map[string]avgSizes{}}, nil
}

// Timeout bounds one flush job.
func (w *FlushWorker) Timeout(*river.Job[FlushArgs]) time.Duration { return w.cfg.JobTimeout }

// NextRetry backs off exponentially up to RetryMax, with jitter so many
// streams waiting on one sink do not retry in lockstep.
func (w *FlushWorker) NextRetry(job *river.Job[FlushArgs]) time.Time {
	return time.Now().Add(backoff(job.Attempt, w.cfg.RetryBase, w.cfg.RetryMax))
}

func backoff(attempt int, base, limit time.Duration) time.Duration {
	d := limit
	if attempt < 1 {
		attempt = 1
	}
	if attempt <= 32 {
		if b := base << (attempt - 1); b > 0 && b < limit {
			d = b
		}
	}
	return d + time.Duration(rand.Int64N(int64(d)/10+1))
}

// Flushed returns how many objects, items and payload bytes this worker
// wrote, and how many flush attempts failed.
func (w *FlushWorker) Flushed() (objects, items, bytes, failures uint64) {
	return w.objects.Load(), w.items.Load(), w.bytes.Load(), w.failed.Load()
}

// claim is a batch being written: a range of a stream's items under a fixed
// key.
type claim struct {
	rowID   int64
	batchID uuid.UUID
	key     string
	firstID int64
	lastID  int64
}

// written is what an object turned out to contain: the items of the
// chunks in full (deleted when the object is recorded) and, when it ended
// inside a chunk, the first items of that chunk (advanced).
type written struct {
	items      int
	bytes      int64
	compressed int64
	first      time.Time
	last       time.Time
	full       []int64
	partial    *chunkCut
}

// chunks is how many chunks the object took items from.
func (wr *written) chunks() int {
	if wr.partial != nil {
		return len(wr.full) + 1
	}
	return len(wr.full)
}

// chunkCut is where an object ended inside a chunk: the chunk's items
// before doneItems (doneBytes payload bytes) are written, those after wait
// for the next batch. fromItems is where this object started in it.
type chunkCut struct {
	id        int64
	fromItems int
	doneItems int
	doneBytes int64
}

// Work writes every due batch of the stream, up to MaxBatchesPerJob; the
// last batch is finished in the transaction that completes the job.
func (w *FlushWorker) Work(ctx context.Context, job *river.Job[FlushArgs]) error {
	stream := job.Args.Stream
	if err := ValidateStream(stream); err != nil {
		return river.JobCancel(err)
	}
	sc := w.cfg.Streams.For(stream)
	for n := 1; ; n++ {
		t0 := time.Now()
		c, busy, err := w.nextClaim(ctx, job.ID, stream, sc)
		if err != nil {
			w.failed.Add(1)
			return err
		}
		if busy {
			return nil
		}
		if c == nil {
			if n > 2*w.cfg.MaxBatchesPerJob {
				return nil
			}
			completed, err := w.completeIfIdle(ctx, job, stream, sc)
			if err != nil || completed {
				return err
			}
			continue
		}
		t1 := time.Now()
		wr, err := w.writeObject(ctx, stream, sc, c)
		t2 := time.Now()
		if errors.Is(err, errEmptyBatch) {
			// The items of the range are gone (deleted by hand): drop the
			// claim and go on.
			if _, err := w.client.Pool().Exec(ctx, w.q(deleteClaimSQL), c.rowID, job.ID); err != nil {
				return fmt.Errorf("error dropping empty batch %s: %w", c.batchID, err)
			}
			continue
		}
		if err != nil {
			w.failed.Add(1)
			w.logger.WarnContext(ctx, "batch flush failed, will retry", "stream", stream, "key", c.key, "attempt", job.Attempt, "error", err)
			return err
		}
		completed, err := w.finish(ctx, job, stream, sc, c, wr, n >= w.cfg.MaxBatchesPerJob)
		if err != nil {
			w.failed.Add(1)
			return err
		}
		w.mu.Lock()
		w.sizes[stream] = avgSizes{item: float64(wr.bytes) / float64(wr.items), chunk: float64(wr.items) / float64(wr.chunks())}
		w.mu.Unlock()
		w.objects.Add(1)
		w.items.Add(uint64(wr.items))
		w.bytes.Add(uint64(wr.bytes))
		w.logger.DebugContext(ctx, "wrote batch object", "stream", stream, "key", c.key, "items", wr.items, "bytes", wr.bytes, "compressed_bytes", wr.compressed,
			"claim", t1.Sub(t0), "write", t2.Sub(t1), "finish", time.Since(t2))
		if completed {
			return nil
		}
	}
}

func (w *FlushWorker) q(sql string) string { return queue.Qualify(w.client.Schema(), sql) }

// nextClaim returns the batch to write next: this job's own claim from an
// earlier attempt, an orphaned claim it adopts, or a new claim if the
// stream is due. nil means nothing is due; busy means another live flush
// job holds the stream's claim.
func (w *FlushWorker) nextClaim(ctx context.Context, jobID int64, stream string, sc StreamConfig) (out *claim, busy bool, err error) {
	err = pgx.BeginFunc(ctx, w.client.Pool(), func(tx pgx.Tx) error {
		var c claim
		var owner int64
		err := tx.QueryRow(ctx, w.q(selectClaimSQL), stream).Scan(&c.rowID, &c.batchID, &c.key, &c.firstID, &c.lastID, &owner)
		switch {
		case err == nil:
			if owner != jobID {
				live, err := w.jobLive(ctx, tx, owner)
				if err != nil {
					return err
				}
				if live {
					// Another flush job (enqueued without uniqueness) owns
					// the stream's batch; it will finish it.
					w.logger.InfoContext(ctx, "stream is being flushed by another job", "stream", stream, "job_id", owner)
					busy = true
					return nil
				}
				if _, err := tx.Exec(ctx, w.q(adoptClaimSQL), c.rowID, jobID, owner); err != nil {
					return fmt.Errorf("error adopting batch %s: %w", c.batchID, err)
				}
				w.logger.WarnContext(ctx, "adopted batch of a finished flush job", "stream", stream, "batch_id", c.batchID, "previous_job_id", owner)
			}
			out = &c
			return nil
		case !errors.Is(err, pgx.ErrNoRows):
			return fmt.Errorf("error reading claimed batch of stream %q: %w", stream, err)
		}

		var h head
		var oldest, firstAt, lastAt *time.Time
		var firstID, lastID *int64
		var count int
		var bytes int64
		measure := func(limit int) error {
			err := queryHead(ctx, tx, w.q(measureClaimSQL), []any{stream, limit, sc.MaxEvents, sc.MaxBytes},
				&h.events, &h.bytes, &h.chunks, &oldest, &firstID, &lastID, &count, &bytes, &firstAt, &lastAt)
			if err != nil {
				return fmt.Errorf("error choosing the next batch of stream %q: %w", stream, err)
			}
			return nil
		}
		limit := headLimit(sc, w.avgSize(stream))
		if err := measure(limit); err != nil {
			return err
		}
		if !h.conclusive(sc, limit) {
			if err := measure(sc.MaxEvents); err != nil {
				return err
			}
		}
		if oldest != nil {
			h.oldest = *oldest
		}
		now := time.Now().UTC()
		if !h.due(sc, now) || firstID == nil {
			return nil
		}
		c = claim{batchID: uuid.Must(uuid.NewV7()), firstID: *firstID, lastID: *lastID}
		c.key = ObjectKey(w.cfg.Prefix, stream, *firstAt, c.batchID.String())
		err = tx.QueryRow(ctx, w.q(insertClaimSQL), c.batchID, stream, c.key, c.firstID, c.lastID, count, bytes, *firstAt, *lastAt, jobID, now).Scan(&c.rowID)
		if err != nil {
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) && pgErr.Code == "23505" {
				// A concurrent flush claimed the stream first; it will
				// write that batch.
				busy = true
				return nil
			}
			return fmt.Errorf("error claiming a batch of stream %q: %w", stream, err)
		}
		out = &c
		return nil
	})
	return out, busy, err
}

// completeIfIdle completes the job when its stream is not due, measuring
// under the job's row lock (see finish for why); it returns false when the
// stream became due meanwhile.
func (w *FlushWorker) completeIfIdle(ctx context.Context, job *river.Job[FlushArgs], stream string, sc StreamConfig) (bool, error) {
	completed := false
	err := pgx.BeginFunc(ctx, w.client.Pool(), func(tx pgx.Tx) error {
		if err := riverjob.LockJob(ctx, tx, w.client.Schema(), job.ID); err != nil {
			return fmt.Errorf("error locking flush job: %w", err)
		}
		h, err := measureHeadFor(ctx, tx, w.client.Schema(), stream, sc, w.avgSize(stream))
		if err != nil {
			return err
		}
		if h.due(sc, time.Now().UTC()) {
			return nil
		}
		if _, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job); err != nil {
			return fmt.Errorf("error completing flush job %d: %w", job.ID, err)
		}
		completed = true
		return nil
	})
	return completed, err
}

func (w *FlushWorker) avgSize(stream string) avgSizes {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.sizes[stream]
}

// jobLive reports whether a flush job may still finish its batch.
func (w *FlushWorker) jobLive(ctx context.Context, tx pgx.Tx, id int64) (bool, error) {
	state, err := riverjob.JobState(ctx, tx, w.client.Schema(), id)
	if err != nil {
		return false, fmt.Errorf("error reading flush job: %w", err)
	}
	return state != "" && !riverjob.Finalized(state), nil
}

// ObjectKey is the key of a batch object:
// {prefix}/{stream}/dt=YYYY-MM-DD/hour=HH/{batchID}.jsonl.gz, the date and
// hour (UTC) being those of the batch's first item.
func ObjectKey(prefix, stream string, first time.Time, batchID string) string {
	first = first.UTC()
	return path.Join(prefix, stream, "dt="+first.Format(time.DateOnly), first.Format("hour=15"), batchID+".jsonl.gz")
}

var errEmptyBatch = errors.New("batch has no items")

// writeObject streams the claimed chunks' items, gzip-compressed JSON
// lines, into the sink, up to the stream's MaxEvents and MaxBytes. Chunks
// are read with one streaming query and encoded as they arrive, so memory
// stays bounded by the encoder's buffers, one chunk and the sink's upload
// part, whatever the batch size.
func (w *FlushWorker) writeObject(ctx context.Context, stream string, sc StreamConfig, c *claim) (*written, error) {
	pr, pw := io.Pipe()
	type result struct {
		wr  *written
		err error
	}
	done := make(chan result, 1)
	encCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		wr, err := w.encode(encCtx, pw, stream, sc, c)
		pw.CloseWithError(err) // nil: the reader sees EOF
		done <- result{wr, err}
	}()
	werr := w.cfg.Sink.Write(ctx, c.key, pr)
	// Unblock the encoder if the sink stopped reading early.
	pr.CloseWithError(cmp.Or(werr, io.ErrClosedPipe))
	if werr != nil {
		cancel()
	}
	res := <-done
	if res.err != nil {
		return nil, res.err
	}
	if werr != nil {
		return nil, werr
	}
	return res.wr, nil
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

func (w *FlushWorker) encode(ctx context.Context, out io.Writer, stream string, sc StreamConfig, c *claim) (*written, error) {
	cw := &countingWriter{w: out}
	// flate emits output in small pieces; batch them before the pipe.
	bw := bufio.NewWriterSize(cw, 64<<10)
	zw, err := gzip.NewWriterLevel(bw, w.cfg.CompressionLevel)
	if err != nil {
		return nil, err
	}
	rows, err := w.client.Pool().Query(ctx, w.q(selectBatchChunksSQL), stream, c.firstID, c.lastID)
	if err != nil {
		return nil, fmt.Errorf("error reading batch %s: %w", c.batchID, err)
	}
	defer rows.Close()
	wr := &written{}
	lw := &lineWriter{zw: zw, wr: wr, maxItems: sc.MaxEvents, maxBytes: sc.MaxBytes}
	for wr.partial == nil && rows.Next() {
		var ch chunkRow
		if err := rows.Scan(&ch.id, &ch.payload, &ch.items, &ch.byteSize, &ch.doneItems, &ch.doneBytes, &ch.at); err != nil {
			return nil, fmt.Errorf("error reading batch %s: %w", c.batchID, err)
		}
		full, err := lw.chunk(&ch)
		if err != nil {
			return nil, fmt.Errorf("error reading batch %s: %w", c.batchID, err)
		}
		if !full {
			break
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("error reading batch %s: %w", c.batchID, err)
	}
	if wr.items == 0 {
		return nil, errEmptyBatch
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	if err := bw.Flush(); err != nil {
		return nil, err
	}
	wr.compressed = cw.n
	return wr, nil
}

// chunkRow is a staged chunk as the flush reads it.
type chunkRow struct {
	id        int64
	payload   pgtype.DriverBytes // valid until the next row: no copy
	items     int
	byteSize  int64
	doneItems int
	doneBytes int64
	at        time.Time
}

// lineWriter writes the items of chunks into an object until it holds
// maxItems items or the next item would take it past maxBytes (but at
// least one item).
type lineWriter struct {
	zw       io.Writer
	wr       *written
	maxItems int
	maxBytes int64
}

var newline = []byte{'\n'}

// chunk writes what fits of the chunk's remaining items and reports
// whether it took all of them; if it took some but not all, it records
// the cut in wr.partial.
func (l *lineWriter) chunk(ch *chunkRow) (full bool, err error) {
	wr := l.wr
	start := ch.doneBytes + int64(ch.doneItems) // each written item had a newline
	if ch.doneItems < 0 || ch.doneItems >= ch.items || start > int64(len(ch.payload)) {
		return false, fmt.Errorf("chunk %d is inconsistent: %d of %d items done, %d of %d bytes", ch.id, ch.doneItems, ch.items, start, len(ch.payload))
	}
	rest := ch.payload[start:]
	n := ch.items - ch.doneItems
	b := int64(len(rest)) - int64(n-1) // the items' bytes, newlines not counted
	if b != ch.byteSize-ch.doneBytes {
		return false, fmt.Errorf("chunk %d is inconsistent: %d payload bytes left for %d items, %d recorded", ch.id, len(rest), n, ch.byteSize-ch.doneBytes)
	}
	if wr.items+n <= l.maxItems && wr.bytes+b <= l.maxBytes {
		if err := l.write(rest, n, b, ch.at); err != nil {
			return false, err
		}
		wr.full = append(wr.full, ch.id)
		return true, nil
	}
	// The object ends inside this chunk: take its items one by one.
	took, tookBytes := 0, int64(0)
	for took < n {
		line := rest
		if i := bytes.IndexByte(rest, '\n'); i >= 0 {
			line = rest[:i]
		} else if took != n-1 {
			return false, fmt.Errorf("chunk %d is inconsistent: %d items, found %d", ch.id, ch.items, ch.doneItems+took+1)
		}
		if wr.items > 0 && (wr.items+1 > l.maxItems || wr.bytes+int64(len(line)) > l.maxBytes) {
			break
		}
		if err := l.write(line, 1, int64(len(line)), ch.at); err != nil {
			return false, err
		}
		took++
		tookBytes += int64(len(line))
		rest = rest[min(len(line)+1, len(rest)):]
	}
	if took == n {
		wr.full = append(wr.full, ch.id)
		return true, nil
	}
	if took > 0 {
		wr.partial = &chunkCut{id: ch.id, fromItems: ch.doneItems, doneItems: ch.doneItems + took, doneBytes: ch.doneBytes + tookBytes}
	}
	return false, nil
}

// write writes n items (their lines joined by newlines, b bytes without
// them) and a newline.
func (l *lineWriter) write(lines []byte, n int, b int64, at time.Time) error {
	if _, err := l.zw.Write(lines); err != nil {
		return err
	}
	if _, err := l.zw.Write(newline); err != nil {
		return err
	}
	wr := l.wr
	if wr.items == 0 || at.Before(wr.first) {
		wr.first = at
	}
	if at.After(wr.last) {
		wr.last = at
	}
	wr.items += n
	wr.bytes += b
	return nil
}

// finish records the object and deletes its items (the chunks it holds
// entirely; of a chunk it ended in, the items it holds) in one
// transaction. Chunks committed late inside the claimed range that the
// object does not hold stay staged for the next batch. When this was the
// job's last batch, the same transaction completes the job (and, if more
// is due, enqueues its successor) and finish returns true; otherwise the
// job goes on to its next claim.
func (w *FlushWorker) finish(ctx context.Context, job *river.Job[FlushArgs], stream string, sc StreamConfig, c *claim, wr *written, last bool) (bool, error) {
	completed := false
	err := pgx.BeginFunc(ctx, w.client.Pool(), func(tx pgx.Tx) error {
		// Mark the object first: a second finish of the same claim (two
		// runs of one job) waits here for the first and then finds the
		// claim written, before it touches a chunk.
		tag, err := tx.Exec(ctx, w.q(markWrittenSQL), c.rowID, wr.items, wr.bytes, wr.compressed, wr.first, wr.last, time.Now().UTC(), job.ID)
		if err != nil {
			return fmt.Errorf("error recording object %q: %w", c.key, err)
		}
		if tag.RowsAffected() != 1 {
			// The claim was adopted by another job because this one looked
			// finished; that job rewrites the same key.
			return fmt.Errorf("batch %s of stream %q was taken over by another flush job", c.batchID, stream)
		}
		if err := consumeChunks(ctx, tx, w.client.Schema(), stream, wr); err != nil {
			return fmt.Errorf("error deleting the items of batch %s: %w", c.batchID, err)
		}
		if !last {
			// More batches may follow: the next claim measures the stream
			// anyway, and completeIfIdle measures under the row lock when
			// it finds nothing due, so a measurement here would be a second
			// walk of the head per batch.
			return nil
		}
		// Lock the job's row before measuring what is left. A stager that
		// saw the stream due while this job was running skipped its
		// enqueue as a duplicate, holding this row locked until it commits:
		// waiting for it here makes its items visible to the measurement.
		// A stager that comes later waits for this commit and then enqueues
		// a new job.
		if err := riverjob.LockJob(ctx, tx, w.client.Schema(), job.ID); err != nil {
			return fmt.Errorf("error locking flush job: %w", err)
		}
		h, err := measureHeadFor(ctx, tx, w.client.Schema(), stream, sc, w.avgSize(stream))
		if err != nil {
			return err
		}
		more := h.due(sc, time.Now().UTC())
		if _, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job); err != nil {
			return fmt.Errorf("error completing flush job %d: %w", job.ID, err)
		}
		if more {
			if err := enqueueFlushTx(ctx, w.client, tx, stream); err != nil {
				return err
			}
		}
		completed = true
		return nil
	})
	return completed, err
}

// consumeChunks deletes the chunks wr holds entirely and advances the one
// it ended in. The object holds exactly what was read, so every chunk must
// still be as read: fewer rows means they were deleted by hand or by
// another finish, and the transaction rolls back.
func consumeChunks(ctx context.Context, tx pgx.Tx, schema, stream string, wr *written) error {
	if len(wr.full) > 0 {
		tag, err := tx.Exec(ctx, queue.Qualify(schema, deleteChunksSQL), stream, wr.full)
		if err != nil {
			return err
		}
		if n := tag.RowsAffected(); n != int64(len(wr.full)) {
			return fmt.Errorf("%d of the %d chunks written are no longer staged", int64(len(wr.full))-n, len(wr.full))
		}
	}
	if p := wr.partial; p != nil {
		tag, err := tx.Exec(ctx, queue.Qualify(schema, advanceChunkSQL), stream, p.id, p.doneItems, p.doneBytes, p.fromItems)
		if err != nil {
			return err
		}
		if tag.RowsAffected() != 1 {
			return fmt.Errorf("chunk %d changed while its items %d..%d were written", p.id, p.fromItems, p.doneItems-1)
		}
	}
	return nil
}
