package batch_test

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tributary-run/tributary/jobs/batch"
	"github.com/tributary-run/tributary/queue"
)

// A producer stages items in its own transaction: once it commits, the
// items are durable, and a stream that reached its count or byte threshold
// has a flush job enqueued in that same transaction.
func ExampleStager_StageTx() {
	logRequest := func(ctx context.Context, pool *pgxpool.Pool, client *queue.Client, path string) error {
		stager, err := batch.NewStager(client, batch.Config{})
		if err != nil {
			return err
		}
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			return stager.StageTx(ctx, tx, "access_logs", fmt.Appendf(nil, `{"path":%q}`, path))
		})
	}
	_ = logRequest // needs a database, so it is compiled, not run
}

// A worker process runs the flush jobs, which write one gzip-compressed
// JSON-lines object per batch into the sink, and the age timer, which
// flushes streams whose oldest item is older than their maximum age.
func ExampleRegister() {
	install := func(ctx context.Context, rt *queue.Runtime) error {
		sink, err := batch.OpenSink(ctx, "file://./.tributary/batches")
		if err != nil {
			return err
		}
		_, err = batch.Register(rt, batch.FlusherConfig{Sink: sink}, batch.AgeTimerConfig{})
		return err
	}
	_ = install // runs in a worker's runtime, so it is compiled, not run
}

// OpenSink opens what BATCH_SINK_URL names; every sink replaces an object
// written again under the same key, so a flush retried after a crash writes
// the same object, never a second one.
func ExampleOpenSink() {
	ctx := context.Background()
	sink, err := batch.OpenSink(ctx, "mem://")
	if err != nil {
		panic(err)
	}
	defer sink.Close()
	key := batch.ObjectKey("", "access_logs", time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC), "b1")
	fmt.Println(sink.Write(ctx, key, strings.NewReader("{}\n")))

	_, err = batch.OpenSink(ctx, "ftp://exports")
	fmt.Println(err)
	fmt.Println(batch.ValidateStream("access logs"))
	// Output:
	// <nil>
	// invalid sink URL "ftp://exports": want file://PATH, s3://BUCKET?region=...&endpoint=... or mem://
	// invalid stream name "access logs": use letters, digits, '.', '_' and '-', starting with a letter or digit, at most 128 characters
}
