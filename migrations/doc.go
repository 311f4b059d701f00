// Package migrations owns the database schema of tributary: River's tables
// (applied with rivermigrate) and tributary's own, embedded as SQL files in
// sql/ and named NNNN_name.up.sql / NNNN_name.down.sql.
//
// A Migrator applies both, in that order, into one schema. Each step runs in
// its own transaction with search_path set to the target schema, and the
// whole run holds a session advisory lock derived from the schema name, so
// two processes that start together do not collide: one migrates, the other
// waits and then finds nothing to do (ExampleNew).
package migrations
