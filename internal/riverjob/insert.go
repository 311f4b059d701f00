package riverjob

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river/rivertype"
)

// NewJob is a job to insert as River's fast batch insert (InsertManyFastTx)
// writes a job that has no unique options: Args is already JSON that jsonb
// accepts, and every other field holds the value River would have resolved
// (its defaults applied: queue, priority, max attempts).
type NewJob struct {
	Kind        string
	Args        []byte
	Queue       string
	Priority    int16
	MaxAttempts int16
	// ScheduledAt, when set, makes the job scheduled at that time; zero
	// makes it available now.
	ScheduledAt time.Time
	// Pending makes the job pending (River's InsertOpts.Pending): it waits
	// for something to make it available (a lane's turn).
	Pending bool
	// Metadata is the job's metadata as JSON; empty is River's {}.
	Metadata []byte
}

// MaxAttempts is n as River writes it to river_job's smallint max_attempts:
// at most 32767, a larger n clamped rather than wrapped.
func MaxAttempts(n int) int16 { return int16(min(n, math.MaxInt16)) }

// row is j as the columns copyJobColumns and insertJobsSQL write.
func (j *NewJob) row(now time.Time) (state rivertype.JobState, scheduled time.Time, metadata []byte) {
	state, scheduled, metadata = rivertype.JobStateAvailable, now, j.Metadata
	switch {
	case j.Pending:
		state = rivertype.JobStatePending
	case !j.ScheduledAt.IsZero():
		state, scheduled = rivertype.JobStateScheduled, j.ScheduledAt.UTC()
	}
	if len(metadata) == 0 {
		metadata = emptyObject
	}
	return state, scheduled, metadata
}

// copyJobColumns are the columns River v0.51.2's InsertManyFastTx writes
// with COPY (riverpgxv5's JobInsertFastManyCopyFrom) less its two unique
// columns, which it leaves NULL for a job without unique options.
var copyJobColumns = []string{"args", "created_at", "kind", "max_attempts", "metadata", "priority", "queue", "scheduled_at", "state", "tags"}

// emptyObject is River's metadata of a job inserted without any.
var emptyObject = []byte("{}")

// CopyNewJobs inserts jobs in tx with one COPY, writing what River's fast
// batch insert writes for jobs without unique options: state available
// (scheduled when ScheduledAt is set, pending when Pending is), created_at
// and, for an available job, scheduled_at from now, metadata {} unless
// Metadata says otherwise, and no tags. It does not
// wake River's producers: River's insert notifies in the same transaction,
// rate-limited per queue; the caller decides (Wake). It is for callers
// that insert many jobs per transaction on a hot path (the inbound AMQP
// bridge), where River's per-job parameters and JSON re-encoding are most
// of the process's cost of a job.
func CopyNewJobs(ctx context.Context, tx pgx.Tx, schema string, jobs []NewJob, now time.Time) (int64, error) {
	now = now.UTC()
	noTags := []string{}
	i := 0
	src := pgx.CopyFromFunc(func() ([]any, error) {
		if i == len(jobs) {
			return nil, nil
		}
		j := &jobs[i]
		i++
		state, scheduled, metadata := j.row(now)
		return []any{j.Args, now, j.Kind, j.MaxAttempts, metadata, j.Priority, j.Queue, scheduled, string(state), noTags}, nil
	})
	n, err := tx.CopyFrom(ctx, pgx.Identifier{schema, "river_job"}, copyJobColumns, src)
	if err != nil {
		return n, fmt.Errorf("error inserting %d jobs: %w", len(jobs), err)
	}
	return n, nil
}

// insertJobsSQL is CopyNewJobs's rows as one INSERT from arrays.
const insertJobsSQL = `INSERT INTO /*schema*/river_job (args, created_at, kind, max_attempts, metadata, priority, queue, scheduled_at, state, tags)
SELECT t.args::jsonb, $1, t.kind, t.max_attempts, t.metadata::jsonb, t.priority, t.queue, t.scheduled_at, t.state::/*schema*/river_job_state, '{}'
FROM unnest($2::text[], $3::text[], $4::smallint[], $5::text[], $6::smallint[], $7::text[], $8::timestamptz[], $9::text[])
  AS t(args, kind, max_attempts, metadata, priority, queue, scheduled_at, state)`

// InsertNewJobs inserts jobs in tx as CopyNewJobs does, with one INSERT
// statement: one round trip against COPY's two, for the few jobs of a
// quiet moment.
func InsertNewJobs(ctx context.Context, tx pgx.Tx, schema string, jobs []NewJob, now time.Time) (int64, error) {
	if len(jobs) == 0 {
		return 0, nil
	}
	now = now.UTC()
	var (
		args, kinds, metadata, queues, states = make([]string, len(jobs)), make([]string, len(jobs)), make([]string, len(jobs)), make([]string, len(jobs)), make([]string, len(jobs))
		attempts, priorities                  = make([]int16, len(jobs)), make([]int16, len(jobs))
		scheduled                             = make([]time.Time, len(jobs))
	)
	for i := range jobs {
		j := &jobs[i]
		state, at, md := j.row(now)
		args[i], kinds[i], metadata[i], queues[i], states[i] = string(j.Args), j.Kind, string(md), j.Queue, string(state)
		attempts[i], priorities[i], scheduled[i] = j.MaxAttempts, j.Priority, at
	}
	tag, err := tx.Exec(ctx, q(schema, insertJobsSQL), now, args, kinds, attempts, metadata, priorities, queues, scheduled, states)
	if err != nil {
		return 0, fmt.Errorf("error inserting %d jobs: %w", len(jobs), err)
	}
	return tag.RowsAffected(), nil
}

// jobRowsSQL is every column of river_job an insert decides, as the text
// of one JSON object per job in id order, so two inserts can be compared
// whole; the times as "scheduled_at = created_at" for jobs to run now and
// "created in the last minute".
const jobRowsSQL = `SELECT jsonb_build_object(
	'args', args, 'attempt', attempt, 'attempted_at', attempted_at, 'attempted_by', attempted_by,
	'errors', errors, 'finalized_at', finalized_at, 'kind', kind, 'max_attempts', max_attempts,
	'metadata', metadata, 'priority', priority, 'queue', queue, 'state', state, 'tags', tags,
	'unique_key', unique_key, 'unique_states', unique_states::text,
	'scheduled_now', scheduled_at = created_at, 'scheduled_at', CASE WHEN scheduled_at = created_at THEN NULL ELSE scheduled_at END,
	'created_recently', created_at > now() - interval '1 minute')::text
FROM /*schema*/river_job ORDER BY id`

// JobRows is every job of schema as jobRowsSQL prints it: what the tests
// of CopyNewJobs' and InsertNewJobs' callers compare with the rows River's
// own insert wrote.
func JobRows(ctx context.Context, db DBTX, schema string) ([]string, error) {
	rows, err := db.Query(ctx, q(schema, jobRowsSQL))
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}
