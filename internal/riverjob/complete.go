package riverjob

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Attempt is one running attempt of a job.
type Attempt struct {
	ID      int64
	Attempt int
}

// CompleteRunning completes the given running attempts in one statement, as
// River's completer does for JobSetStateCompleted (state completed,
// finalized_at), and returns the ids of the jobs it completed; a job no
// longer running at that attempt (rescued and handed on, finalized by
// someone else) is left out. The attempt's metadata updates are not lost:
// River's completer, told of the job's success after the commit, merges
// them into the row even when it is no longer running. One JobCompleteTx per
// job would cost a statement each.
func CompleteRunning(ctx context.Context, db DBTX, schema string, attempts []Attempt, now time.Time) ([]int64, error) {
	if len(attempts) == 0 {
		return nil, nil
	}
	ids, nums := AttemptArrays(attempts)
	rows, err := db.Query(ctx, q(schema, completeRunningSQL), customPlan, ids, nums, now)
	if err != nil {
		return nil, fmt.Errorf("error completing %d jobs: %w", len(attempts), err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("error completing %d jobs: %w", len(attempts), err)
	}
	return out, nil
}

// QueueCompleteRunning queues CompleteRunning's statement on b and sets
// *completed to the ids of the jobs it completed when b's results are read.
func QueueCompleteRunning(b *pgx.Batch, schema string, attempts []Attempt, now time.Time, completed *[]int64) {
	if len(attempts) == 0 {
		return
	}
	ids, nums := AttemptArrays(attempts)
	b.Queue(q(schema, completeRunningSQL), ids, nums, now).Query(func(rows pgx.Rows) error {
		out, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			return fmt.Errorf("error completing %d jobs: %w", len(attempts), err)
		}
		*completed = out
		return nil
	})
}

// AttemptArrays are the attempts as CompleteRunning's parameters: the job
// ids and, at the same positions, their attempts.
func AttemptArrays(attempts []Attempt) (ids []int64, nums []int32) {
	ids, nums = make([]int64, len(attempts)), make([]int32, len(attempts))
	for i, a := range attempts {
		ids[i], nums[i] = a.ID, int32(a.Attempt)
	}
	return ids, nums
}

// completeRunningSQL reaches the jobs through their primary key alone
// (byIDs), and finds each job's attempt by its position in the arrays
// rather than in a join with them: with the jobs estimated at one row, the
// planner joined them in a nested loop that re-ran the arrays' unnest for
// every job (200 jobs, 40,000 rows generated).
var completeRunningSQL = `
` + completeRunningBody("$1", "$2", "$3") + `
RETURNING j.id`

// CompleteRunningUpdate is completeRunningSQL with the parameters a caller's
// statement gives it (ids a bigint[], attempts an int[] in the same order,
// now the finalized_at), for the body of a data-modifying CTE (the
// workflow's completion): it returns the ids of the jobs it completed.
func CompleteRunningUpdate(ids, attempts, now string) string {
	return completeRunningBody(ids, attempts, now) + `
RETURNING j.id`
}

// RunningAttempts is a query for the body of a caller's CTE: the ids of
// the given jobs (ids a bigint[], attempts an int[] in the same order)
// still running at that attempt, read without writing them. The workflow's
// completion records a success when its job is still running at the
// attempt and leaves the job's completion to River's completer.
func RunningAttempts(ids, attempts string) string {
	return `SELECT j.id FROM /*schema*/river_job j
WHERE j.id = ANY(` + ids + `::bigint[]) AND (j.state = 'running') IS TRUE
  AND j.attempt = (` + attempts + `::int[])[array_position(` + ids + `::bigint[], j.id)]`
}

func completeRunningBody(ids, attempts, now string) string {
	return `UPDATE /*schema*/river_job j
SET state = 'completed', finalized_at = ` + now + `
WHERE j.id = ANY(` + ids + `::bigint[]) AND (j.state = 'running') IS TRUE
  AND j.attempt = (` + attempts + `::int[])[array_position(` + ids + `::bigint[], j.id)]`
}
