package migrations_test

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tributary-run/tributary/migrations"
)

// A Migrator applies River's migrations and then tributary's into one
// schema, under an advisory lock, so processes that start together do not
// collide. New checks the schema name and reads the embedded files; only
// Up, Down, Status and Current need the database.
func ExampleNew() {
	// The pool connects lazily: New itself needs no database.
	pool, err := pgxpool.New(context.Background(), "postgres://127.0.0.1:5432/app")
	if err != nil {
		panic(err)
	}
	defer pool.Close()

	m, err := migrations.New(pool, migrations.Config{Schema: "public"})
	if err != nil {
		panic(err)
	}
	for _, mig := range m.All()[:3] {
		fmt.Println(mig.Version, mig.Name)
	}
	migrate := func(ctx context.Context) error {
		res, err := m.Up(ctx) // River's pending migrations, then tributary's
		if err != nil {
			return err
		}
		for _, step := range res.Steps {
			fmt.Println("applied", step.Line, step.Version, step.Name)
		}
		return nil
	}
	_ = migrate // needs a database, so it is compiled, not run

	_, err = migrations.New(pool, migrations.Config{Schema: "tenant-a"})
	fmt.Println(err)
	// Output:
	// 1 tributary_migration
	// 2 outbox
	// 3 schedule
	// invalid schema name "tenant-a": use letters, digits and underscores, starting with a letter or underscore, at most 63 characters
}
