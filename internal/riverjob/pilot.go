package riverjob

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivershared/baseservice"
	"github.com/riverqueue/river/rivershared/riverpilot"
	"github.com/riverqueue/river/rivertype"
)

// Driver is River's pgx driver with a pilot of tributary's (River's
// driver-plugin hook, the one River Pro uses) that differs from River's
// standard pilot in one statement: River's completer takes the rows of
// plain successes from memory instead of reading them back.
//
//   - A job that a middleware finalized itself, in a committed
//     transaction, exactly as the completer would have (NoteCompleted): the
//     workflow coordinator completes a task's job in the transaction that
//     records the task; River's completer, told of the success after that,
//     used to run its JobSetStateIfRunningMany for the job anyway, found it
//     finalized and returned the row for its completion event: on bench
//     workflows' diamonds, a join over river_job read whole twice per call
//     (a hash join over a sequential scan for batches of hundreds), 6.5
//     blocks per task, for rows the process had in memory.
//   - A job whose row the runtime noted when its work began (NoteWorking):
//     the completion sets its state and returns its id and metadata only.
//
// Every other job, and a noted job whose result River reports differently
// or with metadata updates to merge, goes through River's statement as
// before.
type Driver struct {
	*riverpgxv5.Driver
	pilot *pilot
}

// NewDriver is riverpgxv5.New(pool) with tributary's pilot.
func NewDriver(pool *pgxpool.Pool) *Driver {
	return &Driver{Driver: riverpgxv5.New(pool), pilot: &pilot{
		noted: map[int64]*rivertype.JobRow{}, working: map[int64]*rivertype.JobRow{},
	}}
}

// PluginInit is part of River's driver-plugin hook; the pilot needs nothing.
func (d *Driver) PluginInit(*baseservice.Archetype) {}

// PluginPilot is part of River's driver-plugin hook: the client's pilot.
func (d *Driver) PluginPilot() riverpilot.Pilot { return d.pilot }

// pilot is River's standard pilot but for JobSetStateIfRunningMany.
type pilot struct {
	riverpilot.StandardPilot

	mu      sync.Mutex
	noted   map[int64]*rivertype.JobRow // completed jobs' rows as committed, by id
	working map[int64]*rivertype.JobRow // rows of the jobs being worked, as fetched (NoteWorking)
}

// NoteWorking tells d's pilot the row River handed a worker, before the
// work begins; it is copied. When the job then succeeds with no metadata to
// merge, River's completer completes it with a statement that returns only
// its id and metadata, and takes the rest of the row from here (see
// JobSetStateIfRunningMany). The runtime's guard calls it for every job.
func (d *Driver) NoteWorking(job *rivertype.JobRow) {
	row := *job
	d.pilot.mu.Lock()
	d.pilot.working[row.ID] = &row
	d.pilot.mu.Unlock()
}

// NoteCompleted tells the River client working the job of ctx (a job's
// work context) that the caller completed the job's row in a transaction
// that has committed, as River's completer writes a success (state
// completed, finalized_at), with metadata the row's metadata then. When the
// worker then returns success with no metadata updates, River's completer
// takes the job's row from here instead of reading it. job is the row River
// handed to the worker; it is copied. A client without tributary's pilot
// (not built on Driver) is left alone.
func NoteCompleted(ctx context.Context, job *rivertype.JobRow, finalizedAt time.Time, metadata []byte) {
	rc, err := river.ClientFromContextSafely[pgx.Tx](ctx)
	if err != nil {
		return
	}
	p, ok := rc.Pilot().(*pilot)
	if !ok {
		return
	}
	row := *job
	row.State = rivertype.JobStateCompleted
	// What Postgres stores: pgx sends microseconds, truncated.
	at := finalizedAt.Truncate(time.Microsecond)
	row.FinalizedAt = &at
	if metadata != nil {
		row.Metadata = metadata
	}
	p.mu.Lock()
	p.noted[row.ID] = &row
	p.mu.Unlock()
}

// JobSetStateIfRunningMany is River's statement, but for the jobs River
// completes with no metadata to merge (a plain success) whose rows the
// pilot holds:
//
//   - a job noted completed (NoteCompleted): River's statement would find
//     it finalized, write nothing and return its row, which is the noted
//     one;
//   - a job noted working (NoteWorking) and still running: one statement
//     for all of them sets state and finalized_at as River's does and
//     returns their ids and metadata (the one column others write while a
//     job runs: a cancellation's cancel_attempted_at); the rest of each row
//     is the one River fetched. River's statement unnests nine arrays,
//     returns every column of every row, and reads river_job again for the
//     rows it did not update: in `bench jobs` most of what the completions
//     cost Postgres and this process (docs/BENCHMARKS.md).
//
// Every other job, and a noted-working one no longer running, goes through
// River's statement as before. An entry is used once; if a statement fails,
// the entries it would have used go back, and River retries the whole batch
// (a job the first statement completed is then no longer running, and
// River's statement returns its row).
func (p *pilot) JobSetStateIfRunningMany(ctx context.Context, exec riverdriver.Executor, params *riverdriver.JobSetStateIfRunningManyParams) ([]*rivertype.JobRow, error) {
	p.mu.Lock()
	if len(p.noted) == 0 && len(p.working) == 0 {
		p.mu.Unlock()
		return p.StandardPilot.JobSetStateIfRunningMany(ctx, exec, params)
	}
	var (
		known, fetched []*rivertype.JobRow
		fetchedAt      []time.Time
		fetchedIdx     []int
		rest           []int
	)
	for i, id := range params.ID {
		noted, isNoted := p.noted[id]
		delete(p.noted, id)
		working, isWorking := p.working[id]
		delete(p.working, id)
		plain := params.State[i] == rivertype.JobStateCompleted && !params.MetadataDoMerge[i]
		switch {
		case isNoted && plain:
			known = append(known, noted)
		case isWorking && plain && params.FinalizedAt[i] != nil && params.Schema != "" &&
			params.Attempt[i] == nil && params.ErrData[i] == nil && params.ScheduledAt[i] == nil:
			// (River sets none of the three for a success; should a later
			// River set one, its statement writes it.)
			fetched, fetchedAt, fetchedIdx = append(fetched, working), append(fetchedAt, *params.FinalizedAt[i]), append(fetchedIdx, i)
		default:
			rest = append(rest, i)
		}
	}
	p.mu.Unlock()
	if len(known) == 0 && len(fetched) == 0 {
		return p.StandardPilot.JobSetStateIfRunningMany(ctx, exec, params)
	}
	// On a failure the entries used go back (an entry River's statement
	// handles needs none); River retries the whole batch.
	putBack := func(rows []*rivertype.JobRow, into map[int64]*rivertype.JobRow) {
		p.mu.Lock()
		for _, row := range rows {
			into[row.ID] = row
		}
		p.mu.Unlock()
	}

	out := known
	if len(fetched) > 0 {
		ids := make([]int64, len(fetched))
		for i, row := range fetched {
			ids[i] = row.ID
		}
		var doneIDs []int64
		var metadata []string
		if err := exec.QueryRow(ctx, q(params.Schema, completeFetchedSQL), ids, fetchedAt).Scan(&doneIDs, &metadata); err != nil {
			putBack(known, p.noted)
			putBack(fetched, p.working)
			return nil, err
		}
		done := make(map[int64]string, len(doneIDs))
		for i, id := range doneIDs {
			done[id] = metadata[i]
		}
		for i, row := range fetched {
			meta, ok := done[row.ID]
			if !ok { // no longer running: River's statement returns its row
				rest = append(rest, fetchedIdx[i])
				continue
			}
			row.State = rivertype.JobStateCompleted
			at := fetchedAt[i].Truncate(time.Microsecond) // what Postgres stores
			row.FinalizedAt = &at
			row.Metadata = []byte(meta)
			out = append(out, row)
		}
	}
	if len(rest) > 0 {
		// The jobs completed above are no longer running: on the retry,
		// River's statement returns their rows.
		rows, err := p.StandardPilot.JobSetStateIfRunningMany(ctx, exec, subset(params, rest))
		if err != nil {
			putBack(known, p.noted)
			return nil, err
		}
		out = append(out, rows...)
	}
	// River's statement returns its rows by id.
	slices.SortFunc(out, func(a, b *rivertype.JobRow) int { return cmp.Compare(a.ID, b.ID) })
	return out, nil
}

// completeFetchedSQL completes plain successes as River's statement does
// for a running job (state completed, finalized_at the completer's time for
// each), and returns the ids and metadata of the jobs it completed as two
// arrays in one row (River's executor offers QueryRow, not Query). The jobs
// are reached through their primary key from the unnested pairs.
const completeFetchedSQL = `
WITH done AS (
    UPDATE /*schema*/river_job j
    SET state = 'completed', finalized_at = input.finalized_at
    FROM unnest($1::bigint[], $2::timestamptz[]) AS input (id, finalized_at)
    WHERE j.id = input.id AND j.state = 'running'
    RETURNING j.id, j.metadata
)
SELECT coalesce(array_agg(id), '{}'), coalesce(array_agg(metadata::text), '{}')
FROM done`

// subset is params for the jobs at the positions idx.
func subset(params *riverdriver.JobSetStateIfRunningManyParams, idx []int) *riverdriver.JobSetStateIfRunningManyParams {
	out := *params // Now, Schema
	n := len(idx)
	out.ID, out.Attempt, out.ErrData, out.FinalizedAt = make([]int64, n), make([]*int, n), make([][]byte, n), make([]*time.Time, n)
	out.MetadataDoMerge, out.MetadataUpdates, out.ScheduledAt = make([]bool, n), make([][]byte, n), make([]*time.Time, n)
	out.State = make([]rivertype.JobState, n)
	for j, i := range idx {
		out.ID[j], out.Attempt[j], out.ErrData[j], out.FinalizedAt[j] = params.ID[i], params.Attempt[i], params.ErrData[i], params.FinalizedAt[i]
		out.MetadataDoMerge[j], out.MetadataUpdates[j], out.ScheduledAt[j] = params.MetadataDoMerge[i], params.MetadataUpdates[i], params.ScheduledAt[i]
		out.State[j] = params.State[i]
	}
	return &out
}
