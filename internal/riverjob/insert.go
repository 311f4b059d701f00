package riverjob

import (
	"context"
	"fmt"
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
}

// copyJobColumns are the columns River v0.51.2's InsertManyFastTx writes
// with COPY (riverpgxv5's JobInsertFastManyCopyFrom) less its two unique
// columns, which it leaves NULL for a job without unique options.
var copyJobColumns = []string{"args", "created_at", "kind", "max_attempts", "metadata", "priority", "queue", "scheduled_at", "state", "tags"}

// emptyObject is River's metadata of a job inserted without any.
var emptyObject = []byte("{}")

// CopyNewJobs inserts jobs in tx with one COPY, writing what River's fast
// batch insert writes for jobs without unique options or metadata: state
// available (scheduled when ScheduledAt is set), created_at and, for an
// available job, scheduled_at from now, metadata {} and no tags. It does not
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
		state, scheduled := rivertype.JobStateAvailable, now
		if !j.ScheduledAt.IsZero() {
			state, scheduled = rivertype.JobStateScheduled, j.ScheduledAt.UTC()
		}
		return []any{j.Args, now, j.Kind, j.MaxAttempts, emptyObject, j.Priority, j.Queue, scheduled, string(state), noTags}, nil
	})
	n, err := tx.CopyFrom(ctx, pgx.Identifier{schema, "river_job"}, copyJobColumns, src)
	if err != nil {
		return n, fmt.Errorf("error inserting %d jobs: %w", len(jobs), err)
	}
	return n, nil
}
