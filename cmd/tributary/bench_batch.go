package main

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"

	"github.com/tributary-run/tributary/internal/bench"
	"github.com/tributary-run/tributary/jobs/batch"
	"github.com/tributary-run/tributary/queue"
)

// benchBatchOptions are the flags of `tributary bench batch`.
type benchBatchOptions struct {
	N         int    `json:"n"`
	Size      int    `json:"item_bytes"`
	Producers int    `json:"producers"`
	Chunk     int    `json:"chunk"`
	Streams   int    `json:"streams"`
	Workers   int    `json:"flush_workers"`
	MaxEvents int    `json:"max_events"`
	MaxBytes  int64  `json:"max_bytes"`
	SinkURL   string `json:"sink"`
}

// benchBatchResult is one measured phase.
type benchBatchResult struct {
	Name        string        `json:"name"`
	Items       int           `json:"items"`
	Duration    time.Duration `json:"duration_ns"`
	ItemsPerSec float64       `json:"items_per_sec"`
	// PeakHeapInUse is the highest HeapInuse sampled during the phase;
	// BaseHeapInUse the value just before it started.
	PeakHeapInUse uint64 `json:"peak_heap_inuse_bytes,omitempty"`
	BaseHeapInUse uint64 `json:"base_heap_inuse_bytes,omitempty"`
}

func newBenchBatchCmd(a *app) *cobra.Command {
	var o benchBatchOptions
	var asJSON bool
	var cpuProfile string
	cmd := &cobra.Command{
		Use:   "batch",
		Short: "Measure batch flushes: items/s from staging to object written, and peak memory",
		Long: `Measure batch flushes in four phases, each on a fresh schema, in one process:

  direct      the seed's way and the baseline: items gzip-encoded straight
              into objects of --max-events items, no Postgres
  end-to-end  --producers goroutines stage N items (StageMany of --chunk) into
              --streams streams while the flush worker writes objects; time
              from the first stage to the last item written
  stage       staging N items with no worker running (builds a backlog)
  drain       the flush worker drains that backlog; peak heap in use is
              sampled every 10 ms, to compare with 2 x --max-bytes

Objects are flushed on the count threshold; a stream's last partial object
waits for the age trigger (max age 2 s in this benchmark), so choose N as a
multiple of --chunk x --streams x --max-events (the defaults are) to time
full objects only. The sink defaults to a temporary directory (file://),
removed afterwards.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			switch {
			case o.N < 1:
				return usagef("-n %d must be at least 1", o.N)
			case o.Size < 16:
				return usagef("--size %d must be at least 16", o.Size)
			case o.Producers < 1 || o.Chunk < 1 || o.Streams < 1 || o.Workers < 1:
				return usagef("--producers, --chunk, --streams and --workers must be at least 1")
			case o.MaxEvents < 1 || o.MaxBytes < int64(o.Size):
				return usagef("--max-events must be at least 1 and --max-bytes at least --size")
			}
			ctx := cmd.Context()
			if o.SinkURL == "" {
				dir, err := os.MkdirTemp("", "tributary-bench-batch-")
				if err != nil {
					return err
				}
				defer os.RemoveAll(dir)
				o.SinkURL = "file://" + filepath.Join(dir, "objects")
			}
			pool, err := a.pool(ctx)
			if err != nil {
				return err
			}
			defer pool.Close()
			stopProfile, err := startCPUProfile(cpuProfile)
			if err != nil {
				return err
			}
			defer stopProfile()
			quiet := benchLogger(a)
			if a.cfg.LogLevel == "debug" {
				quiet = a.logger
			}
			results, err := runBatchBench(ctx, pool, o, quiet, func(r benchBatchResult) {
				if !asJSON {
					printBatchResult(a, r, o)
				}
			})
			if err != nil {
				return err
			}
			if asJSON {
				return a.printJSON(map[string]any{"options": o, "results": results, "cpus": runtime.NumCPU()})
			}
			fmt.Fprintf(a.stdout, "%d CPUs; 2 x max bytes = %.1f MiB\n", runtime.NumCPU(), float64(2*o.MaxBytes)/(1<<20))
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVarP(&o.N, "n", "n", 500000, "items per phase")
	f.IntVar(&o.Size, "size", 200, "bytes per item (a JSON object)")
	f.IntVar(&o.Producers, "producers", 4, "concurrent staging goroutines")
	f.IntVar(&o.Chunk, "chunk", 1000, "items per staging transaction")
	f.IntVar(&o.Streams, "streams", 5, "streams the producers stage into (chunks go round-robin)")
	f.IntVar(&o.Workers, "workers", 4, "flush jobs running at once")
	f.IntVar(&o.MaxEvents, "max-events", batch.MaxEventsDefault, "items per object")
	f.Int64Var(&o.MaxBytes, "max-bytes", batch.MaxBytesDefault, "payload bytes per object")
	f.StringVar(&o.SinkURL, "sink", "", "sink URL (default: a temporary directory)")
	f.BoolVar(&asJSON, "json", false, "print one JSON document")
	cpuProfileFlag(f, &cpuProfile)
	return cmd
}

func printBatchResult(a *app, r benchBatchResult, o benchBatchOptions) {
	line := fmt.Sprintf("%-11s %8d items in %7.2fs  %9.0f items/s", r.Name, r.Items, r.Duration.Seconds(), r.ItemsPerSec)
	if r.PeakHeapInUse > 0 {
		line += fmt.Sprintf("  peak heap in use %.1f MiB (%.1f MiB before)", float64(r.PeakHeapInUse)/(1<<20), float64(r.BaseHeapInUse)/(1<<20))
	}
	fmt.Fprintln(a.stdout, line)
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

func (s *heapSampler) finish(r *benchBatchResult) {
	close(s.stop)
	<-s.done
	r.BaseHeapInUse, r.PeakHeapInUse = s.base.Load(), s.peak.Load()
}

func runBatchBench(ctx context.Context, pool *pgxpool.Pool, o benchBatchOptions, logger *slog.Logger, report func(benchBatchResult)) ([]benchBatchResult, error) {
	payloads := benchPayloads(o.N, o.Size)
	streams := batch.Config{Defaults: batch.StreamConfig{MaxEvents: o.MaxEvents, MaxBytes: o.MaxBytes, MaxAge: 2 * time.Second}}
	var results []benchBatchResult
	add := func(r benchBatchResult) {
		r.ItemsPerSec = float64(r.Items) / r.Duration.Seconds()
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
		start := time.Now()
		for i := 0; i < len(payloads); i += o.MaxEvents {
			if err := hand(ctx, payloads[i:min(i+o.MaxEvents, len(payloads))]); err != nil {
				return nil, err
			}
		}
		r := benchBatchResult{Name: "direct", Items: o.N, Duration: time.Since(start)}
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
		start := time.Now()
		if err := env.rt.Start(ctx); err != nil {
			env.close()
			return nil, err
		}
		err = stageAll(ctx, env.stager, payloads, o)
		if err == nil {
			err = env.waitWritten(ctx, o.N)
		}
		r := benchBatchResult{Name: "end-to-end", Items: o.N, Duration: time.Since(start)}
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
		start := time.Now()
		if err := stageAll(ctx, env.stager, payloads, o); err != nil {
			env.close()
			return nil, err
		}
		add(benchBatchResult{Name: "stage", Items: o.N, Duration: time.Since(start)})

		payloads = nil // the drain's memory is the flusher's alone
		hs := startHeapSampler()
		start = time.Now()
		err = env.rt.Start(ctx)
		if err == nil {
			err = batch.EnqueueFlush(ctx, env.rt.Client, env.streamNames...)
		}
		if err == nil {
			err = env.waitWritten(ctx, o.N)
		}
		r := benchBatchResult{Name: "drain", Items: o.N, Duration: time.Since(start)}
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
	pool        *pgxpool.Pool
	schema      string
	rt          *queue.Runtime
	stager      *batch.Stager
	sink        *batch.BlobSink
	streamNames []string
	drop        func()
}

func newBatchBenchEnv(ctx context.Context, pool *pgxpool.Pool, o benchBatchOptions, streams batch.Config, logger *slog.Logger) (*batchBenchEnv, error) {
	schema, drop, err := bench.TempSchema(ctx, pool, "bench_batch")
	if err != nil {
		return nil, err
	}
	env := &batchBenchEnv{pool: pool, schema: schema, drop: drop}
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
func stageAll(ctx context.Context, stager *batch.Stager, payloads [][]byte, o benchBatchOptions) error {
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
