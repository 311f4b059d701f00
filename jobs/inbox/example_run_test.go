package inbox_test

import (
	"cmp"
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tributary-run/tributary/jobs/inbox"
	"github.com/tributary-run/tributary/migrations"
	"github.com/tributary-run/tributary/queue"
)

// Messages written to an inbox in one transaction are handled by the
// workers once it commits, here in the same process, on a fresh schema of
// the test database (TEST_DATABASE_URL, else DATABASE_URL), dropped at the
// end.
func Example_writeAndHandle() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, schema, drop := exampleSchema(ctx)
	defer drop()

	handled := make(chan string, 2)
	webhooks, err := inbox.New(inbox.Config{
		Name: "webhooks",
		HandleFunc: func(ctx context.Context, m *inbox.Message) error {
			handled <- m.ID + " " + m.Type + " " + string(m.Body)
			return nil
		},
	})
	if err != nil {
		panic(err)
	}
	rt, err := queue.NewRuntime(pool, queue.RuntimeConfig{Schema: schema})
	if err != nil {
		panic(err)
	}
	if err := inbox.Install(rt, webhooks); err != nil { // before the runtime starts
		panic(err)
	}
	if err := rt.Start(ctx); err != nil {
		panic(err)
	}
	defer func() { _ = rt.Stop(context.Background()) }()

	w, err := webhooks.Writer(schema)
	if err != nil {
		panic(err)
	}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := w.InsertMessagesTx(ctx, tx, []inbox.Message{
			{ID: "evt-1", Type: "payment.succeeded", Body: []byte(`{"amount":500}`)},
			{ID: "evt-2", Type: "payment.refunded", Body: []byte(`{"amount":200}`)},
		})
		return err
	})
	if err != nil {
		panic(err)
	}
	if err := w.Wake(ctx, pool); err != nil { // after the commit: the workers look now
		panic(err)
	}
	got := []string{<-handled, <-handled}
	slices.Sort(got) // the messages may be handled in parallel
	fmt.Println(strings.Join(got, "\n"))
	// Output:
	// evt-1 payment.succeeded {"amount":500}
	// evt-2 payment.refunded {"amount":200}
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
