package migrations_test

import (
	"cmp"
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tributary-run/tributary/migrations"
)

// Up applies what is pending and nothing else, so every process may run it
// at start; here on a fresh schema of the test database
// (TEST_DATABASE_URL, else DATABASE_URL), dropped at the end.
func ExampleMigrator_Up() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url := cmp.Or(os.Getenv("TEST_DATABASE_URL"), os.Getenv("DATABASE_URL"), "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	schema := "example_" + strings.ToLower(rand.Text()[:10])
	defer func() {
		_, _ = pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
	}()

	m, err := migrations.New(pool, migrations.Config{Schema: schema})
	if err != nil {
		panic(err)
	}
	current, err := m.Current(ctx)
	if err != nil {
		panic(fmt.Sprintf("this example needs PostgreSQL (set TEST_DATABASE_URL or DATABASE_URL): %v", err))
	}
	fmt.Println("current before:", current)
	first, err := m.Up(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println("applied some:", len(first.Steps) > 0)
	if current, err = m.Current(ctx); err != nil {
		panic(err)
	}
	fmt.Println("current after:", current)
	again, err := m.Up(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println("applied by a second Up:", len(again.Steps))
	// Output:
	// current before: false
	// applied some: true
	// current after: true
	// applied by a second Up: 0
}
