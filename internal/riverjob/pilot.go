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
// standard pilot in one statement: River's completer does not read the row
// of a job that a middleware finalized itself, in a committed transaction,
// exactly as the completer would have (NoteCompleted). The workflow
// coordinator completes a task's job in the transaction that records the
// task; River's completer, told of the success after that, used to run its
// JobSetStateIfRunningMany for the job anyway, found it finalized and
// returned the row for its completion event: on bench workflows' diamonds,
// a join over river_job read whole twice per call (a hash join over a
// sequential scan for batches of hundreds), 6.5 blocks per task, for rows
// the process had in memory. Every other job, and a noted job whose result
// River reports differently or with metadata updates to merge, goes
// through River's statement as before.
type Driver struct {
	*riverpgxv5.Driver
	pilot *pilot
}

// NewDriver is riverpgxv5.New(pool) with tributary's pilot.
func NewDriver(pool *pgxpool.Pool) *Driver {
	return &Driver{Driver: riverpgxv5.New(pool), pilot: &pilot{noted: map[int64]*rivertype.JobRow{}}}
}

// PluginInit is part of River's driver-plugin hook; the pilot needs nothing.
func (d *Driver) PluginInit(*baseservice.Archetype) {}

// PluginPilot is part of River's driver-plugin hook: the client's pilot.
func (d *Driver) PluginPilot() riverpilot.Pilot { return d.pilot }

// pilot is River's standard pilot but for JobSetStateIfRunningMany.
type pilot struct {
	riverpilot.StandardPilot

	mu    sync.Mutex
	noted map[int64]*rivertype.JobRow // completed jobs' rows as committed, by id
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

// JobSetStateIfRunningMany is River's statement for the jobs not noted
// (NoteCompleted) and the noted rows, as River's statement would return
// them, for the jobs River completes without metadata to merge: River's
// statement finds such a job finalized, writes nothing and returns its row.
// A noted entry is used once; if River's statement fails, the entries go
// back, and River retries the whole batch.
func (p *pilot) JobSetStateIfRunningMany(ctx context.Context, exec riverdriver.Executor, params *riverdriver.JobSetStateIfRunningManyParams) ([]*rivertype.JobRow, error) {
	p.mu.Lock()
	if len(p.noted) == 0 {
		p.mu.Unlock()
		return p.StandardPilot.JobSetStateIfRunningMany(ctx, exec, params)
	}
	var known []*rivertype.JobRow
	var rest []int
	for i, id := range params.ID {
		row, ok := p.noted[id]
		if ok {
			delete(p.noted, id)
		}
		if ok && params.State[i] == rivertype.JobStateCompleted && !params.MetadataDoMerge[i] {
			known = append(known, row)
			continue
		}
		rest = append(rest, i)
	}
	p.mu.Unlock()
	if len(known) == 0 {
		return p.StandardPilot.JobSetStateIfRunningMany(ctx, exec, params)
	}
	out := known
	if len(rest) > 0 {
		rows, err := p.StandardPilot.JobSetStateIfRunningMany(ctx, exec, subset(params, rest))
		if err != nil {
			p.mu.Lock()
			for _, row := range known {
				p.noted[row.ID] = row
			}
			p.mu.Unlock()
			return nil, err
		}
		out = append(out, rows...)
	}
	// River's statement returns its rows by id.
	slices.SortFunc(out, func(a, b *rivertype.JobRow) int { return cmp.Compare(a.ID, b.ID) })
	return out, nil
}

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
