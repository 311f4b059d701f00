package riverjob

import (
	"context"
	"errors"
	"fmt"
	"regexp"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river/rivertype"
)

// Finalized reports whether River is done with a job in state: completed,
// discarded or cancelled (River's finalized states; only a retry brings
// such a job back).
func Finalized(state rivertype.JobState) bool {
	switch state {
	case rivertype.JobStateCompleted, rivertype.JobStateDiscarded, rivertype.JobStateCancelled:
		return true
	}
	return false
}

// JobState returns the state of job id, "" when there is no such job (never
// inserted, or deleted by hand or by River's retention).
func JobState(ctx context.Context, db DBTX, schema string, id int64) (rivertype.JobState, error) {
	var state string
	err := db.QueryRow(ctx, q(schema, jobStateSQL), id).Scan(&state)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("error reading the state of job %d: %w", id, err)
	}
	return rivertype.JobState(state), nil
}

// JobStates returns the state of the job each of items names (id gives an
// item's job id), in the items' order: "" for an item whose job does not
// exist (never inserted, or deleted by hand or by River's retention). It is
// one statement for all of them, for a listing of a feature's own rows
// that shows their jobs' states.
func JobStates[T any](ctx context.Context, db DBTX, schema string, items []T, id func(T) int64) ([]rivertype.JobState, error) {
	out := make([]rivertype.JobState, len(items))
	if len(items) == 0 {
		return out, nil
	}
	ids := make([]int64, len(items))
	for i, it := range items {
		ids[i] = id(it)
	}
	rows, err := db.Query(ctx, q(schema, jobStatesSQL), ids)
	if err != nil {
		return nil, fmt.Errorf("error reading the states of %d jobs: %w", len(ids), err)
	}
	defer rows.Close()
	states := make(map[int64]rivertype.JobState, len(ids))
	for rows.Next() {
		var jobID int64
		var state string
		if err := rows.Scan(&jobID, &state); err != nil {
			return nil, fmt.Errorf("error reading the states of %d jobs: %w", len(ids), err)
		}
		states[jobID] = rivertype.JobState(state)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("error reading the states of %d jobs: %w", len(ids), err)
	}
	for i, jobID := range ids {
		out[i] = states[jobID]
	}
	return out, nil
}

// KeyedJob is a row of a feature's own table that names a job: its key (a
// stream, a consumer) and the job, with the job's state ("" when the job
// is gone).
type KeyedJob struct {
	Key   string
	JobID int64
	State rivertype.JobState
}

// KeyedJobStates runs query, a statement of the caller's on its own table
// that returns a text key and a job id per row, then looks up the jobs'
// states (JobStates): a feature's rows with the states of the jobs they
// name, without a statement that joins the feature's table to River's.
func KeyedJobStates(ctx context.Context, db DBTX, schema, query string, args ...any) ([]KeyedJob, error) {
	rows, err := db.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	keyed, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (KeyedJob, error) {
		var k KeyedJob
		err := r.Scan(&k.Key, &k.JobID)
		return k, err
	})
	if err != nil {
		return nil, err
	}
	states, err := JobStates(ctx, db, schema, keyed, func(k KeyedJob) int64 { return k.JobID })
	if err != nil {
		return nil, err
	}
	for i := range keyed {
		keyed[i].State = states[i]
	}
	return keyed, nil
}

// LockJob takes job id's row lock in tx, so whoever changes the job (River's
// completer, a stager's unique insert that found it) waits for tx, and tx
// for them. A job that does not exist locks nothing.
func LockJob(ctx context.Context, tx pgx.Tx, schema string, id int64) error {
	if _, err := tx.Exec(ctx, q(schema, lockJobSQL), id); err != nil {
		return fmt.Errorf("error locking job %d: %w", id, err)
	}
	return nil
}

// CountJobs counts the jobs in the given states, all jobs when there are
// none. It reads every matching row: for tests and small tables, not for
// dashboards (see the read models).
func CountJobs(ctx context.Context, db DBTX, schema string, states ...rivertype.JobState) (int64, error) {
	var n int64
	var err error
	if len(states) == 0 {
		err = db.QueryRow(ctx, q(schema, countJobsSQL)).Scan(&n)
	} else {
		ss := make([]string, len(states))
		for i, s := range states {
			ss[i] = string(s)
		}
		err = db.QueryRow(ctx, q(schema, countJobsInStatesSQL), ss).Scan(&n)
	}
	if err != nil {
		return 0, fmt.Errorf("error counting jobs: %w", err)
	}
	return n, nil
}

const (
	jobStateSQL  = `SELECT state::text FROM /*schema*/river_job WHERE id = $1`
	jobStatesSQL = `SELECT id, state::text FROM /*schema*/river_job WHERE id = ANY($1::bigint[])`
	lockJobSQL   = `SELECT 1 FROM /*schema*/river_job WHERE id = $1 FOR UPDATE`

	countJobsSQL         = `SELECT count(*) FROM /*schema*/river_job`
	countJobsInStatesSQL = `SELECT count(*) FROM /*schema*/river_job WHERE state = ANY($1::text[]::/*schema*/river_job_state[])`
)

// CancelAttemptedKey is the key River's JobCancel writes in a job's
// metadata when it asks for the job's cancellation: a running job carries
// it from then on, whether or not its process heard of the request.
const CancelAttemptedKey = "cancel_attempted_at"

// ValidQueueName is River v0.51.2's rule for queue names (client.go,
// validateQueueName): at most 64 lower-case letters and digits, separated
// by single '_', '-' or '|'. Checked before writing where River's insert is
// not the only check (the workflow's validation, the COPY insert of queue).
func ValidQueueName(name string) bool {
	return name != "" && len(name) <= 64 && riverQueueName.MatchString(name)
}

var riverQueueName = regexp.MustCompile(`^(?:[a-z0-9])+(?:[_|\-]?[a-z0-9]+)*$`)

// UnfinishedJobExists is a SQL condition, for a caller's statement on its
// own table, that holds while the job whose id the expression id gives
// exists and is not finalized (River's check constraint
// finalized_or_finalized_at_null makes finalized_at NULL exactly then). It
// probes river_job by its primary key alone: one index lookup per row the
// caller tests (the inbox's clean-up of batches whose job is gone).
func UnfinishedJobExists(id string) string {
	return `EXISTS (SELECT 1 FROM /*schema*/river_job j WHERE j.id = ` + id + ` AND j.finalized_at IS NULL)`
}
