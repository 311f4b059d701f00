// Package pgtest gives each test its own freshly migrated schema in a real
// Postgres database, so tests run in parallel without seeing each other's
// rows, plus helpers to run a Runtime inside a test and to wait for
// conditions without sleeping (the package example shows a test).
//
// The database comes from TEST_DATABASE_URL, else DATABASE_URL, else the
// local server on 127.0.0.1:5432. When it cannot be reached the test fails
// with a message saying how to start one; it never skips.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/riverjob"
	"github.com/tributary-run/tributary/migrations"
	"github.com/tributary-run/tributary/queue"
)

// PoolMaxConns bounds the pool shared by all tests of one test binary. The
// server's max_connections (100 by default) is shared by every package's
// test binary running at once.
const PoolMaxConns = 16

// DB is one test's schema on the shared pool.
type DB struct {
	Pool   *pgxpool.Pool
	Schema string
	URL    string
}

// Q qualifies a SQL string's /*schema*/ markers with this test's schema.
func (db *DB) Q(sql string) string { return queue.Qualify(db.Schema, sql) }

// LogRows logs every row each query (with /*schema*/ markers) returns, or
// its error: a failed test's dump of the tables it waited on.
func (db *DB) LogRows(tb testing.TB, queries ...string) {
	tb.Helper()
	for _, q := range queries {
		rows, err := db.Pool.Query(context.Background(), db.Q(q))
		if err != nil {
			tb.Logf("%s: %v", q, err)
			continue
		}
		for rows.Next() {
			vals, _ := rows.Values()
			tb.Logf("%v", vals)
		}
		rows.Close()
	}
}

// DatabaseURL returns the database the tests use.
func DatabaseURL() string {
	for _, name := range []string{"TEST_DATABASE_URL", "DATABASE_URL"} {
		if v := os.Getenv(name); v != "" {
			return v
		}
	}
	return "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
}

var (
	sharedOnce sync.Once
	sharedPool *pgxpool.Pool
	sharedErr  error
)

// Pool returns the pool shared by every test in this binary.
func Pool(tb testing.TB) *pgxpool.Pool {
	tb.Helper()
	sharedOnce.Do(func() {
		url := DatabaseURL()
		cfg, err := pgxpool.ParseConfig(url)
		if err != nil {
			sharedErr = fmt.Errorf("invalid test database URL %s: %w", queue.RedactURL(url), err)
			return
		}
		cfg.MaxConns = PoolMaxConns
		cfg.ConnConfig.RuntimeParams["application_name"] = "tributary-test"
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err == nil {
			err = pool.Ping(ctx)
		}
		if err != nil {
			sharedErr = fmt.Errorf("tests need PostgreSQL at %s (set TEST_DATABASE_URL, or run `make test`, which finds or starts one): %w", queue.RedactURL(url), err)
			return
		}
		sharedPool = pool
	})
	if sharedErr != nil {
		tb.Fatal(sharedErr)
	}
	return sharedPool
}

// New creates a schema with every migration applied, dropped when the test
// ends.
func New(tb testing.TB) *DB {
	tb.Helper()
	pool := Pool(tb)
	schema := "t_" + randomHex(6)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	m, err := migrations.New(pool, migrations.Config{Schema: schema})
	require.NoError(tb, err)
	_, err = m.Up(ctx)
	require.NoError(tb, err, "migrating test schema %s", schema)
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := pool.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			tb.Logf("dropping test schema %s: %v", schema, err)
		}
	})
	return &DB{Pool: pool, Schema: schema, URL: DatabaseURL()}
}

// Client returns an insert-only tributary client on the test's schema.
func (db *DB) Client(tb testing.TB) *queue.Client {
	tb.Helper()
	c, err := queue.NewClient(db.Pool, queue.ClientConfig{Schema: db.Schema, Logger: Logger(tb)})
	require.NoError(tb, err)
	return c
}

// StartRuntime builds a runtime on the test's schema, lets register add
// workers and services, starts it, and stops it when the test ends. Short
// fetch intervals keep tests quick; cfg overrides them.
func StartRuntime(tb testing.TB, db *DB, cfg queue.RuntimeConfig, register func(rt *queue.Runtime)) *queue.Runtime {
	tb.Helper()
	cfg.Schema = db.Schema
	if cfg.Logger == nil {
		cfg.Logger = Logger(tb)
	}
	if cfg.FetchCooldown == 0 {
		cfg.FetchCooldown = 10 * time.Millisecond
	}
	if cfg.FetchPollInterval == 0 {
		cfg.FetchPollInterval = 100 * time.Millisecond
	}
	if cfg.ShutdownTimeout == 0 {
		cfg.ShutdownTimeout = 5 * time.Second
	}
	if len(cfg.Queues) == 0 {
		// Plain jobs' queue and event consumers' (events.QueueDefault).
		cfg.Queues = map[string]int{"default": 10, "events": 10}
	}
	rt, err := queue.NewRuntime(db.Pool, cfg)
	require.NoError(tb, err)
	if register != nil {
		register(rt)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(tb, rt.Start(ctx))
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := rt.Stop(ctx); err != nil {
			tb.Logf("stopping runtime: %v", err)
		}
	})
	return rt
}

// WaitFor polls cond until it returns true or the timeout passes, then
// fails the test with msg and the last error.
func WaitFor(tb testing.TB, timeout time.Duration, msg string, cond func() (bool, error)) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	interval := 5 * time.Millisecond
	var lastErr error
	for {
		ok, err := cond()
		if err == nil && ok {
			return
		}
		lastErr = err
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %s waiting for %s (last error: %v)", timeout, msg, lastErr)
		}
		time.Sleep(interval)
		if interval < 100*time.Millisecond {
			interval *= 2
		}
	}
}

// JobState returns a job's state, or "" when the job does not exist.
func (db *DB) JobState(ctx context.Context, id int64) (rivertype.JobState, error) {
	return riverjob.JobState(ctx, db.Pool, db.Schema, id)
}

// WaitForJobState waits until the job reaches state.
func (db *DB) WaitForJobState(tb testing.TB, id int64, state rivertype.JobState, timeout time.Duration) {
	tb.Helper()
	WaitFor(tb, timeout, fmt.Sprintf("job %d to be %s", id, state), func() (bool, error) {
		s, err := db.JobState(context.Background(), id)
		return s == state, err
	})
}

// CountJobs counts the schema's jobs in the given states (all when none).
func (db *DB) CountJobs(tb testing.TB, states ...rivertype.JobState) int {
	tb.Helper()
	n, err := riverjob.CountJobs(context.Background(), db.Pool, db.Schema, states...)
	require.NoError(tb, err)
	return int(n)
}

// JobRows is the schema's jobs as riverjob.JobRows prints them: for tests
// that check an insert of tributary's own writes what River's insert
// writes.
func (db *DB) JobRows(tb testing.TB) []string {
	tb.Helper()
	rows, err := riverjob.JobRows(context.Background(), db.Pool, db.Schema)
	require.NoError(tb, err)
	return rows
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
