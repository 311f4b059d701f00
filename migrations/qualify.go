package migrations

import (
	"strings"

	"github.com/jackc/pgx/v5"
)

// schemaMarker is written before every table name in tributary's SQL
// constants; Qualify replaces it with the quoted schema. Tables are always
// qualified because EnqueueTx and EmitTx run on the caller's connection,
// whose search_path is the caller's business. (Migration files are the
// exception: the Migrator runs them with search_path set to the schema.)
const schemaMarker = "/*schema*/"

// Qualify replaces every "/*schema*/" marker in sql with the quoted schema
// name followed by a dot: "/*schema*/tributary_outbox" becomes
// "public".tributary_outbox.
func Qualify(schema, sql string) string {
	return strings.ReplaceAll(sql, schemaMarker, pgx.Identifier{schema}.Sanitize()+".")
}
