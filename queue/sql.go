package queue

import (
	"context"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DBTX is the narrowest database handle tributary's SQL needs. A
// *pgxpool.Pool, a *pgx.Conn and a pgx.Tx all satisfy it, so the same code
// runs inside the caller's transaction or on its own.
type DBTX interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// schemaMarker is written before every table name in tributary's SQL
// constants; Qualify replaces it with the quoted schema. Tables are always
// qualified because EnqueueTx and EmitTx run on the caller's connection,
// whose search_path is the caller's business.
const schemaMarker = "/*schema*/"

// Qualify replaces every "/*schema*/" marker in sql with the quoted schema
// name followed by a dot: "/*schema*/tributary_outbox" becomes
// "public".tributary_outbox.
func Qualify(schema, sql string) string {
	return strings.ReplaceAll(sql, schemaMarker, pgx.Identifier{schema}.Sanitize()+".")
}
