package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"

	"github.com/tributary-run/tributary/jobs/batch"
	"github.com/tributary-run/tributary/queue"
)

// BatchOptions configures RunBatch. Every field must be set (the flags of
// `tributary bench batch` give the defaults).
type BatchOptions struct {
	// N is the number of items of each phase, Size the bytes of each.
	N    int `json:"n"`
	Size int `json:"item_bytes"`
	// Producers stage concurrently, Chunk items per transaction, spread
	// round-robin over Streams streams.
	Producers int `json:"producers"`
	Chunk     int `json:"chunk"`
	Streams   int `json:"streams"`
	// Workers is how many flush jobs run at once.
	Workers int `json:"flush_workers"`
	// MaxEvents and MaxBytes are the streams' object thresholds.
	MaxEvents int   `json:"max_events"`
	MaxBytes  int64 `json:"max_bytes"`
	// SinkURL is where the objects go.
	SinkURL string       `json:"sink"`
	Logger  *slog.Logger `json:"-"`
}

// BatchReport is the outcome of RunBatch.
type BatchReport struct {
	Options BatchOptions  `json:"options"`
	Results []BatchResult `json:"results"`
	CPUs    int           `json:"cpus"`
}

// BatchResult is one measured phase.
type BatchResult struct {
	Name        string        `json:"name"`
	Items       int           `json:"items"`
	Duration    time.Duration `json:"duration_ns"`
	ItemsPerSec float64       `json:"items_per_sec"`
	// PeakHeapInUse is the highest HeapInuse sampled during the phase;
	// BaseHeapInUse the value just before it started.
	PeakHeapInUse uint64 `json:"peak_heap_inuse_bytes,omitempty"`
	BaseHeapInUse uint64 `json:"base_heap_inuse_bytes,omitempty"`
	// CPU is what this process and the phase's Postgres backends spent
	// (the database part is zero where their /proc entries cannot be read).
	CPU cpuUse `json:"cpu"`
}

// RunBatch measures batch flushes in four phases, each on a fresh schema:
// direct (the seed's way and the baseline: items gzip-encoded straight into
// objects of MaxEvents items, no Postgres), end-to-end (Producers stage N
// items into Streams streams while the flush worker writes objects), stage
// (staging N items with no worker running) and drain (the flush worker
// drains that backlog, peak heap sampled every 10 ms). It writes a line per
// phase to w. o.SinkURL must be set.
func RunBatch(ctx context.Context, pool *pgxpool.Pool, o BatchOptions, w io.Writer) (*BatchReport, error) {
	results, err := runBatchBench(ctx, pool, o, o.Logger, func(r BatchResult) { printBatchResult(w, r) })
	if err != nil {
		return nil, err
	}
	rep := &BatchReport{Options: o, Results: results, CPUs: runtime.NumCPU()}
	fmt.Fprintf(w, "%d CPUs; 2 x max bytes = %.1f MiB; gzip level %d on both paths\n", rep.CPUs, float64(2*o.MaxBytes)/(1<<20), batch.CompressionLevelDefault)
	return rep, nil
}

func printBatchResult(w io.Writer, r BatchResult) {
	line := fmt.Sprintf("%-11s %8d items in %7.2fs  %9.0f items/s", r.Name, r.Items, r.Duration.Seconds(), r.ItemsPerSec)
	if r.PeakHeapInUse > 0 {
		line += fmt.Sprintf("  peak heap in use %.1f MiB (%.1f MiB before)", float64(r.PeakHeapInUse)/(1<<20), float64(r.BaseHeapInUse)/(1<<20))
	}
	per := func(d time.Duration) string {
		if d <= 0 {
			return "?"
		}
		return fmt.Sprintf("%.1f", float64(d.Nanoseconds())/1e3/float64(r.Items))
	}
	line += fmt.Sprintf("  CPU per item: process %s us, Postgres %s us", per(r.CPU.Self), per(r.CPU.Database))
	fmt.Fprintln(w, line)
}

// benchPayloads makes n JSON items of exactly size bytes with random
// letters, so gzip has realistic work.
func benchPayloads(n, size int) [][]byte {
	const letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	rng := rand.New(rand.NewPCG(1, 2))
	out := make([][]byte, n)
	for i := range out {
		head := fmt.Sprintf(`{"i":%d,"p":"`, i)
		pad := size - len(head) - 2
		b := make([]byte, 0, size)
		b = append(b, head...)
		for j := 0; j < pad; j++ {
			b = append(b, letters[rng.IntN(len(letters))])
		}
		b = append(b, '"', '}')
		out[i] = b
	}
	return out
}

// heapSampler records the peak HeapInuse every 10 ms until stopped.
type heapSampler struct {
	base, peak atomic.Uint64
	stop       chan struct{}
	done       chan struct{}
}

func startHeapSampler() *heapSampler {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	s := &heapSampler{stop: make(chan struct{}), done: make(chan struct{})}
	s.base.Store(ms.HeapInuse)
	s.peak.Store(ms.HeapInuse)
	go func() {
		defer close(s.done)
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-t.C:
			}
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > s.peak.Load() {
				s.peak.Store(ms.HeapInuse)
			}
		}
	}()
	return s
}

func (s *heapSampler) finish(r *BatchResult) {
	close(s.stop)
	<-s.done
	r.BaseHeapInUse, r.PeakHeapInUse = s.base.Load(), s.peak.Load()
}

func runBatchBench(ctx context.Context, pool *pgxpool.Pool, o BatchOptions, logger *slog.Logger, report func(BatchResult)) ([]BatchResult, error) {
	payloads := benchPayloads(o.N, o.Size)
	streams := batch.Config{Defaults: batch.StreamConfig{MaxEvents: o.MaxEvents, MaxBytes: o.MaxBytes, MaxAge: 2 * time.Second}}
	var results []BatchResult
	add := func(r BatchResult) {
		r.ItemsPerSec = rate(r.Items, r.Duration)
		results = append(results, r)
		report(r)
	}

	// direct: the seed's hand-off, gzip straight to the sink.
	{
		sink, err := batch.OpenSink(ctx, o.SinkURL)
		if err != nil {
			return nil, err
		}
		hand, err := batch.SinkHandOff(sink, "direct", "bench")
		if err != nil {
			return nil, err
		}
		hs := startHeapSampler()
		self := selfCPU()
		start := time.Now()
		for i := 0; i < len(payloads); i += o.MaxEvents {
			if err := hand(ctx, payloads[i:min(i+o.MaxEvents, len(payloads))]); err != nil {
				return nil, err
			}
		}
		r := BatchResult{Name: "direct", Items: o.N, Duration: time.Since(start), CPU: cpuUse{Self: selfCPU() - self}}
		hs.finish(&r)
		_ = sink.Close()
		add(r)
	}

	// end-to-end: staging and flushing at once.
	{
		env, err := newBatchBenchEnv(ctx, pool, o, streams, logger)
		if err != nil {
			return nil, err
		}
		hs := startHeapSampler()
		mark := env.pool.mark()
		start := time.Now()
		if err := env.rt.Start(ctx); err != nil {
			env.close()
			return nil, err
		}
		err = stageAll(ctx, env.stager, payloads, o)
		if err == nil {
			err = env.waitWritten(ctx, o.N)
		}
		r := BatchResult{Name: "end-to-end", Items: o.N, Duration: time.Since(start)}
		r.CPU.Self, r.CPU.Database = env.pool.since(mark)
		hs.finish(&r)
		env.close()
		if err != nil {
			return nil, err
		}
		add(r)
	}

	// stage, then drain the backlog.
	{
		env, err := newBatchBenchEnv(ctx, pool, o, streams, logger)
		if err != nil {
			return nil, err
		}
		mark := env.pool.mark()
		start := time.Now()
		if err := stageAll(ctx, env.stager, payloads, o); err != nil {
			env.close()
			return nil, err
		}
		r := BatchResult{Name: "stage", Items: o.N, Duration: time.Since(start)}
		r.CPU.Self, r.CPU.Database = env.pool.since(mark)
		add(r)

		payloads = nil // the drain's memory is the flusher's alone
		hs := startHeapSampler()
		mark = env.pool.mark()
		start = time.Now()
		err = env.rt.Start(ctx)
		if err == nil {
			err = batch.EnqueueFlush(ctx, env.rt.Client, env.streamNames...)
		}
		if err == nil {
			err = env.waitWritten(ctx, o.N)
		}
		r = BatchResult{Name: "drain", Items: o.N, Duration: time.Since(start)}
		r.CPU.Self, r.CPU.Database = env.pool.since(mark)
		hs.finish(&r)
		env.close()
		if err != nil {
			return nil, err
		}
		add(r)
	}
	return results, nil
}

// batchBenchEnv is a fresh schema with a runtime (not started) that runs
// the flush worker and the age timer.
type batchBenchEnv struct {
	pool        *cpuPool // the phase's own, so its backends' CPU can be read
	schema      string
	rt          *queue.Runtime
	stager      *batch.Stager
	sink        *batch.BlobSink
	streamNames []string
	drop        func()
}

func newBatchBenchEnv(ctx context.Context, pool *pgxpool.Pool, o BatchOptions, streams batch.Config, logger *slog.Logger) (*batchBenchEnv, error) {
	cp, err := newCPUPool(ctx, pool)
	if err != nil {
		return nil, err
	}
	pool = cp.Pool
	schema, dropSchema, err := TempSchema(ctx, pool, "bench_batch")
	if err != nil {
		cp.Close()
		return nil, err
	}
	drop := func() { dropSchema(); cp.Close() }
	env := &batchBenchEnv{pool: cp, schema: schema, drop: drop}
	for s := 0; s < o.Streams; s++ {
		env.streamNames = append(env.streamNames, fmt.Sprintf("bench-%d", s))
	}
	env.sink, err = batch.OpenSink(ctx, o.SinkURL)
	if err != nil {
		drop()
		return nil, err
	}
	env.rt, err = queue.NewRuntime(pool, queue.RuntimeConfig{
		Schema:            schema,
		Logger:            logger,
		Queues:            map[string]int{"default": o.Workers},
		FetchCooldown:     10 * time.Millisecond,
		FetchPollInterval: 50 * time.Millisecond,
	})
	if err == nil {
		_, err = batch.Register(env.rt, batch.FlusherConfig{Streams: streams, Sink: env.sink, Prefix: schema},
			batch.AgeTimerConfig{Interval: 100 * time.Millisecond})
	}
	if err == nil {
		env.stager, err = batch.NewStager(env.rt.Client, streams)
	}
	if err != nil {
		drop()
		return nil, err
	}
	return env, nil
}

func (e *batchBenchEnv) close() {
	stopCtx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_ = e.rt.Stop(stopCtx)
	_ = e.sink.Close()
	e.drop()
}

func (e *batchBenchEnv) waitWritten(ctx context.Context, n int) error {
	q := queue.Qualify(e.schema, `SELECT coalesce(sum(item_count), 0) FROM /*schema*/tributary_batch_object WHERE status = 'written'`)
	deadline := time.Now().Add(10 * time.Minute)
	for {
		var written int
		if err := e.pool.QueryRow(ctx, q).Scan(&written); err != nil {
			return err
		}
		if written >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("only %d of %d items were written after 10 minutes", written, n)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// stageAll stages payloads from o.Producers goroutines in chunks of
// o.Chunk, spread over o.Streams streams.
func stageAll(ctx context.Context, stager *batch.Stager, payloads [][]byte, o BatchOptions) error {
	var next atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	for p := 0; p < o.Producers; p++ {
		g.Go(func() error {
			for {
				i := int(next.Add(int64(o.Chunk))) - o.Chunk
				if i >= len(payloads) {
					return nil
				}
				chunk := payloads[i:min(i+o.Chunk, len(payloads))]
				stream := fmt.Sprintf("bench-%d", (i/o.Chunk)%o.Streams)
				if err := stager.Stage(gctx, stream, chunk...); err != nil {
					return err
				}
			}
		})
	}
	return g.Wait()
}
