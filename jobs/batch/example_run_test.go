package batch_test

import (
	"bytes"
	"cmp"
	"compress/gzip"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tributary-run/tributary/jobs/batch"
	"github.com/tributary-run/tributary/migrations"
	"github.com/tributary-run/tributary/queue"
)

// objectSink is a batch.Sink of the example's own: it hands each object's
// JSON lines over instead of storing them. A real sink (batch.OpenSink:
// files, S3) stores the object under key and replaces one written before
// under the same key.
type objectSink struct {
	objects chan<- string
}

func (s objectSink) Write(ctx context.Context, key string, r io.Reader) error {
	zr, err := gzip.NewReader(r) // objects are gzip-compressed JSON lines
	if err != nil {
		return err
	}
	lines, err := io.ReadAll(zr)
	if err != nil {
		return err
	}
	s.objects <- string(bytes.TrimSpace(lines))
	return nil
}

func (objectSink) Close() error { return nil }

// Items staged in a transaction become one object once the stream reaches
// its threshold (here 3 items): the flush job enqueued with the third item
// writes them to the sink. The example runs on a fresh schema of the test
// database (TEST_DATABASE_URL, else DATABASE_URL), dropped at the end.
func Example_stageAndFlush() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, schema, drop := exampleSchema(ctx)
	defer drop()

	streams := batch.Config{Streams: map[string]batch.StreamConfig{"access_logs": {MaxEvents: 3}}}
	objects := make(chan string, 1)
	rt, err := queue.NewRuntime(pool, queue.RuntimeConfig{Schema: schema})
	if err != nil {
		panic(err)
	}
	if _, err := batch.Register(rt, batch.FlusherConfig{Sink: objectSink{objects: objects}, Streams: streams}, batch.AgeTimerConfig{}); err != nil {
		panic(err)
	}
	if err := rt.Start(ctx); err != nil {
		panic(err)
	}
	defer func() { _ = rt.Stop(context.Background()) }()

	stager, err := batch.NewStager(rt.Client, streams)
	if err != nil {
		panic(err)
	}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		for _, path := range []string{"/", "/pricing", "/signup"} {
			if err := stager.StageTx(ctx, tx, "access_logs", fmt.Appendf(nil, `{"path":%q}`, path)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		panic(err)
	}
	fmt.Println(<-objects)
	// Output:
	// {"path":"/"}
	// {"path":"/pricing"}
	// {"path":"/signup"}
}

// exampleSchema migrates a new schema on the test database and returns a
// func that drops it.
func exampleSchema(ctx context.Context) (*pgxpool.Pool, string, func()) {
	url := cmp.Or(os.Getenv("TEST_DATABASE_URL"), os.Getenv("DATABASE_URL"), "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		panic(err)
	}
	schema := "example_" + strings.ToLower(rand.Text()[:10])
	m, err := migrations.New(pool, migrations.Config{Schema: schema})
	if err != nil {
		panic(err)
	}
	if _, err := m.Up(ctx); err != nil {
		panic(fmt.Sprintf("this example needs PostgreSQL (set TEST_DATABASE_URL or DATABASE_URL): %v", err))
	}
	return pool, schema, func() {
		_, _ = pool.Exec(context.Background(), "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
		pool.Close()
	}
}
