package events

import "github.com/jackc/pgx/v5"

// customPlan makes pgx run a statement as an unnamed one, which Postgres
// plans for the parameter values and the table's size at that moment. The
// events statements join arrays against tables that grow from empty
// (river_job, tributary_outbox, tributary_event_lane): a plan cached while
// a table was small (pgx prepares statements and Postgres switches them to
// a generic plan after five runs) would keep scanning river_job for every
// lane promotion long after the table had grown
// (docs/decisions/0001-generic-plans.md).
var customPlan = pgx.QueryExecModeExec
