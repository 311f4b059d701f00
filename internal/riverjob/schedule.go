package riverjob

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// The job metadata keys that tie a scheduled job to its schedule and fire
// time (scheduler.MetaSchedule and MetaFireAt). Migration 0003's unique
// index river_job_tributary_schedule_fire is over these two keys, partial
// on the fire time's presence; FireJobID's statement names them as
// literals so that it can use the index.
const (
	ScheduleKey = "tributary_schedule"
	FireAtKey   = "tributary_fire_at"
)

// FireJobID returns the id of the job schedule inserted for fireAt (as
// written in its metadata), if there is one.
func FireJobID(ctx context.Context, db DBTX, schema, schedule, fireAt string) (id int64, found bool, err error) {
	err = db.QueryRow(ctx, q(schema, fireJobSQL), schedule, fireAt).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("error looking for the job of schedule %q at %s: %w", schedule, fireAt, err)
	}
	return id, true, nil
}

const fireJobSQL = `
SELECT id FROM /*schema*/river_job
WHERE metadata ? '` + FireAtKey + `'
  AND metadata ->> '` + ScheduleKey + `' = $1 AND metadata ->> '` + FireAtKey + `' = $2`
