package queue

import (
	"github.com/tributary-run/tributary/internal/riverjob"
	"github.com/tributary-run/tributary/migrations"
)

// DBTX is the one database handle tributary's functions take: a
// *pgxpool.Pool, a *pgx.Conn or a pgx.Tx. It has Begin (a savepoint on a
// pgx.Tx), so code that needs a transaction of its own starts one on
// whatever it was given. Functions that must run in the caller's
// transaction (EnqueueTx, EmitTx, StageTx, ...) take pgx.Tx.
type DBTX = riverjob.DBTX

// Qualify replaces every "/*schema*/" marker in sql with the quoted schema
// name followed by a dot: "/*schema*/tributary_outbox" becomes
// "public".tributary_outbox (see migrations.Qualify, its one
// implementation).
func Qualify(schema, sql string) string { return migrations.Qualify(schema, sql) }
