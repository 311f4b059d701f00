package riverjob

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tributary-run/tributary/migrations"
)

// DBTX is the one database handle tributary's functions take (exported as
// queue.DBTX): a *pgxpool.Pool, a *pgx.Conn or a pgx.Tx all satisfy it, so
// the same code runs inside the caller's transaction or on its own. Begin is
// part of it (on a pgx.Tx it opens a savepoint), so a function that needs a
// transaction of its own starts one without asking what it was given.
// Functions that must run in the caller's transaction take pgx.Tx instead.
type DBTX interface {
	Begin(ctx context.Context) (pgx.Tx, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// customPlan runs a statement unnamed, so Postgres plans it for its
// parameters and the tables' sizes at that moment. river_job grows from
// empty; a generic plan cached while it was small keeps its shape after it
// grew (docs/ARCHITECTURE.md, events, "Plans").
var customPlan = pgx.QueryExecModeExec

// q qualifies a statement's /*schema*/ markers.
func q(schema, sql string) string { return migrations.Qualify(schema, sql) }
