package main

import (
	"context"
	"io"
	"os"
	"path/filepath"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/tributary-run/tributary/cmd/tributary/internal/bench"
	"github.com/tributary-run/tributary/jobs/batch"
)

func newBenchBatchCmd(a *app) *cobra.Command {
	var o bench.BatchOptions
	var asJSON bool
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
			if o.SinkURL == "" {
				dir, err := os.MkdirTemp("", "tributary-bench-batch-")
				if err != nil {
					return err
				}
				defer os.RemoveAll(dir)
				o.SinkURL = "file://" + filepath.Join(dir, "objects")
			}
			o.Logger = benchLogger(a)
			if a.cfg.LogLevel == "debug" {
				o.Logger = a.logger
			}
			return a.runBench(cmd.Context(), asJSON, a.benchReport(asJSON), func(ctx context.Context, pool *pgxpool.Pool, w io.Writer) (any, error) {
				return bench.RunBatch(ctx, pool, o, w)
			})
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
	return cmd
}
