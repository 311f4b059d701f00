package tributarytest

import (
	"cmp"
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tributary-run/tributary/migrations"
	"github.com/tributary-run/tributary/queue"
)

// PoolMaxConnsDefault bounds each test's pool: enough for an App working
// jobs, forwarding events and running workflows in the test, small enough
// for a few tests in parallel on one server (max_connections is 100 by
// default).
const PoolMaxConnsDefault = 10

// DB is one test's schema, migrated with River's and tributary's
// migrations, on a pool of its own whose search_path is the schema: the
// test's own tables (CREATE TABLE orders ...) land in it too, and the
// Require functions find it without being told. The schema and the pool
// go when the test ends.
type DB struct {
	// Pool connects to the test database with search_path set to Schema.
	Pool *pgxpool.Pool
	// Schema is the test's schema: give it to the App
	// (tributary.Config.Schema) or to the feature packages' configs.
	Schema string
	// URL is the database's URL, for a child process the test starts (its
	// schema is Schema, not the URL's search_path).
	URL string
}

// DBOpts are options for NewDB. A nil *DBOpts is the defaults.
type DBOpts struct {
	// PoolMaxConns bounds the test's pool. Defaults to
	// PoolMaxConnsDefault.
	PoolMaxConns int32
}

// DatabaseURL is the database the tests use: TEST_DATABASE_URL, else
// DATABASE_URL, else queue.DatabaseURLDefault (a local server on
// 127.0.0.1:5432). Each test works in a schema of its own, so a shared
// development database is fine.
func DatabaseURL() string {
	return cmp.Or(os.Getenv("TEST_DATABASE_URL"), os.Getenv("DATABASE_URL"), queue.DatabaseURLDefault)
}

// NewDB creates a schema with every migration applied, on a pool of its
// own, both dropped when the test ends (tb.Cleanup). When the database
// cannot be reached, the test fails with a message saying how to start
// one: it never skips, so a CI run without a database is red, not green.
func NewDB(tb testing.TB, opts *DBOpts) *DB {
	tb.Helper()
	if opts == nil {
		opts = &DBOpts{}
	}
	url := DatabaseURL()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		tb.Fatalf("tributarytest: invalid database URL %s: %v", queue.RedactURL(url), err)
	}
	schema := "tt_" + strings.ToLower(rand.Text()[:12])
	cfg.MaxConns = cmp.Or(opts.PoolMaxConns, PoolMaxConnsDefault)
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	cfg.ConnConfig.RuntimeParams["application_name"] = "tributarytest"

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err == nil {
		pingCtx, cancelPing := context.WithTimeout(ctx, 10*time.Second)
		err = pool.Ping(pingCtx)
		cancelPing()
		if err != nil {
			pool.Close()
		}
	}
	if err != nil {
		tb.Fatalf("tributarytest: tests need PostgreSQL at %s: %v\n"+
			"Start one, for example `docker run -d -p 5432:5432 -e POSTGRES_HOST_AUTH_METHOD=trust postgres`, "+
			"and point TEST_DATABASE_URL at it (postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable).",
			queue.RedactURL(url), err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			tb.Logf("tributarytest: dropping schema %s: %v", schema, err)
		}
		// Close waits for every connection to come back: one held by an
		// app still running or a transaction left open would hang the
		// test binary, so give up on it after a while and say why.
		closed := make(chan struct{})
		go func() { pool.Close(); close(closed) }()
		select {
		case <-closed:
		case <-ctx.Done():
			tb.Errorf("tributarytest: the test's pool still has connections in use at the end of the test: stop the app (WorkUntilIdle does) and end every transaction")
		}
	})

	m, err := migrations.New(pool, migrations.Config{Schema: schema, Logger: Logger(tb)})
	if err != nil {
		tb.Fatalf("tributarytest: %v", err)
	}
	if _, err := m.Up(ctx); err != nil {
		tb.Fatalf("tributarytest: migrating schema %s: %v", schema, err)
	}
	return &DB{Pool: pool, Schema: schema, URL: url}
}

// Q replaces the /*schema*/ markers of tributary's SQL with the test's
// schema (queue.Qualify).
func (db *DB) Q(sql string) string { return queue.Qualify(db.Schema, sql) }

// Logger returns a logger for code under test: silent, unless the
// environment sets TRIBUTARY_TEST_LOG=1, then debug and up to stderr.
func Logger(tb testing.TB) *slog.Logger {
	tb.Helper()
	if os.Getenv("TRIBUTARY_TEST_LOG") == "" {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// schemaOf resolves the schema an assertion reads: the one given, else the
// connection's current schema (the first of its search_path that exists),
// which for a DB's pool is the test's schema.
func schemaOf(ctx context.Context, tx pgx.Tx, given string) (string, error) {
	if given != "" {
		return given, nil
	}
	var schema *string
	if err := tx.QueryRow(ctx, "SELECT current_schema()").Scan(&schema); err != nil {
		return "", fmt.Errorf("error reading current_schema(): %w", err)
	}
	if schema == nil {
		return "", fmt.Errorf("the connection's search_path names no existing schema: set the Schema option")
	}
	return *schema, nil
}
