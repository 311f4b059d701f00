package riverjob

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"sync"
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

// row is j as the columns copyJobsSQL and insertJobsSQL write.
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

// emptyObject is River's metadata of a job inserted without any.
var emptyObject = []byte("{}")

// copyJobsSQL is CopyNewJobs's COPY: the columns River v0.51.2's
// InsertManyFastTx writes with COPY (riverpgxv5's JobInsertFastManyCopyFrom)
// less its two unique columns, which it leaves NULL for a job without unique
// options, and less tags, whose default is River's empty array.
const copyJobsSQL = `COPY /*schema*/river_job (args, created_at, kind, max_attempts, metadata, priority, queue, scheduled_at, state) FROM STDIN (FORMAT binary)`

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
//
// The rows go out in PostgreSQL's binary COPY format, encoded here
// (copyReader) into one reused buffer per COPY, rather than through pgx's
// CopyFrom, which looks up an encode plan per value and grows a fresh
// buffer for each 64 KiB it sends: about half the process's CPU of an
// insert (docs/decisions/0008-river-rows-by-copy.md).
func CopyNewJobs(ctx context.Context, tx pgx.Tx, schema string, jobs []NewJob, now time.Time) (int64, error) {
	if len(jobs) == 0 {
		return 0, nil
	}
	nowMicros := pgMicros(now)
	n, err := copyRows(ctx, tx, q(schema, copyJobsSQL), len(jobs), func(b []byte, i int) []byte {
		return appendJobTuple(b, &jobs[i], now, nowMicros)
	})
	if err != nil {
		return n, fmt.Errorf("error inserting %d jobs: %w", len(jobs), err)
	}
	return n, nil
}

// LaneEvent is a row of LaneEventTable as CopyLaneEvents writes it: its
// place, and its dispatch job's queue, max attempts and args.
type LaneEvent struct {
	LaneSeq
	Queue       string
	MaxAttempts int
	Args        []byte
}

const copyLaneEventsSQL = `COPY /*schema*/` + LaneEventTable + ` (consumer, aggregate_id, seq, queue, max_attempts, args) FROM STDIN (FORMAT binary)`

// CopyLaneEvents inserts the lane events evs (unclaimed) in tx with one
// COPY, encoded as CopyNewJobs encodes jobs: through pgx's CopyFrom (an
// encode plan looked up per value), the encoding of the bus's lane events
// was 0.45 s of a 16.2 s profile of `bench events` for 100,000 rows
// (docs/decisions/0008-river-rows-by-copy.md).
func CopyLaneEvents(ctx context.Context, tx pgx.Tx, schema string, evs []LaneEvent) (int64, error) {
	if len(evs) == 0 {
		return 0, nil
	}
	n, err := copyRows(ctx, tx, q(schema, copyLaneEventsSQL), len(evs), func(b []byte, i int) []byte {
		ev := &evs[i]
		b = binary.BigEndian.AppendUint16(b, 6)
		b = appendTextField(b, ev.Consumer)
		b = appendTextField(b, ev.AggregateID)
		b = appendInt64Field(b, ev.Seq)
		b = appendTextField(b, ev.Queue)
		b = appendInt16Field(b, MaxAttempts(ev.MaxAttempts))
		return appendTextField(b, ev.Args) // a text column (migration 0020)
	})
	if err != nil {
		return n, fmt.Errorf("error inserting %d lane events: %w", len(evs), err)
	}
	return n, nil
}

// copyRows runs the COPY statement sql in tx with n tuples, the i-th
// appended by tuple, through a pooled copyReader.
func copyRows(ctx context.Context, tx pgx.Tx, sql string, n int, tuple func(b []byte, i int) []byte) (int64, error) {
	r := copyReaderPool.Get().(*copyReader)
	r.reset(n, tuple)
	tag, err := tx.Conn().PgConn().CopyFrom(ctx, r, sql)
	r.reset(0, nil)
	copyReaderPool.Put(r)
	return tag.RowsAffected(), err
}

// copyReaderPool holds copyReaders with their buffers grown.
var copyReaderPool = sync.Pool{New: func() any { return new(copyReader) }}

// copyChunk is about how much copyReader encodes at a time: pgconn sends
// what one Read returns as one CopyData message, up to 64 KiB.
const copyChunk = 64 << 10

// copyReader is the COPY data of n rows in the binary format: the
// signature and header, one tuple per row (appended by tuple), the
// trailer. It encodes the next chunk of tuples when the last one has been
// read.
type copyReader struct {
	n          int
	tuple      func(b []byte, i int) []byte
	next       int // the next row to encode
	buf        []byte
	off        int  // buf[off:] is still to be read
	began, end bool // the header and the trailer were encoded
}

func (r *copyReader) reset(n int, tuple func(b []byte, i int) []byte) {
	*r = copyReader{n: n, tuple: tuple, buf: r.buf[:0]}
}

// copySignature begins binary COPY data, followed by the flags and the
// header extension's length, both 0.
const copySignature = "PGCOPY\n\xff\r\n\x00"

func (r *copyReader) Read(p []byte) (int, error) {
	for r.off == len(r.buf) {
		if r.end {
			return 0, io.EOF
		}
		r.fill()
	}
	n := copy(p, r.buf[r.off:])
	r.off += n
	return n, nil
}

func (r *copyReader) fill() {
	b := r.buf[:0]
	if !r.began {
		b = append(b, copySignature...)
		b = binary.BigEndian.AppendUint32(b, 0)
		b = binary.BigEndian.AppendUint32(b, 0)
		r.began = true
	}
	for ; r.next < r.n && len(b) < copyChunk; r.next++ {
		b = r.tuple(b, r.next)
	}
	if r.next == r.n {
		b = binary.BigEndian.AppendUint16(b, 0xffff) // -1 fields: the end
		r.end = true
	}
	r.buf, r.off = b, 0
}

// appendJobTuple appends j's tuple (copyJobsSQL's columns; nowMicros is
// now as timestamptz's binary value): each field its length, then its
// value in the type's binary form (jsonb: version 1 and the text;
// timestamptz: microseconds since 2000; an enum: its label).
func appendJobTuple(b []byte, j *NewJob, now time.Time, nowMicros int64) []byte {
	state, scheduled, metadata := j.row(now)
	b = binary.BigEndian.AppendUint16(b, 9)
	b = appendJSONB(b, j.Args)
	b = appendInt64Field(b, nowMicros)
	b = appendTextField(b, j.Kind)
	b = appendInt16Field(b, j.MaxAttempts)
	b = appendJSONB(b, metadata)
	b = appendInt16Field(b, j.Priority)
	b = appendTextField(b, j.Queue)
	b = appendInt64Field(b, pgMicros(scheduled))
	return appendTextField(b, string(state))
}

func appendJSONB(b, doc []byte) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(doc)+1))
	b = append(b, 1)
	return append(b, doc...)
}

func appendTextField[T string | []byte](b []byte, s T) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
	return append(b, s...)
}

func appendInt16Field(b []byte, v int16) []byte {
	b = binary.BigEndian.AppendUint32(b, 2)
	return binary.BigEndian.AppendUint16(b, uint16(v))
}

func appendInt64Field(b []byte, v int64) []byte {
	b = binary.BigEndian.AppendUint32(b, 8)
	return binary.BigEndian.AppendUint64(b, uint64(v))
}

// pgEpochMicros is midnight UTC of January 1, 2000, PostgreSQL's epoch, in microseconds
// since 1970.
const pgEpochMicros = 946_684_800_000_000

// pgMicros is t as timestamptz's binary value, truncated to the
// microsecond as pgx encodes it.
func pgMicros(t time.Time) int64 {
	return t.Unix()*1_000_000 + int64(t.Nanosecond())/1000 - pgEpochMicros
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
	tag, err := tx.Exec(ctx, q(schema, insertJobsSQL), newJobsArgs(jobs, now)...)
	if err != nil {
		return 0, fmt.Errorf("error inserting %d jobs: %w", len(jobs), err)
	}
	return tag.RowsAffected(), nil
}

// QueueInsertNewJobs queues InsertNewJobs's statement for jobs (at least
// one) on b, for a caller that sends it in one round trip with others.
func QueueInsertNewJobs(b *pgx.Batch, schema string, jobs []NewJob, now time.Time) {
	b.Queue(q(schema, insertJobsSQL), newJobsArgs(jobs, now)...)
}

// newJobsArgs are insertJobsSQL's arguments for jobs.
func newJobsArgs(jobs []NewJob, now time.Time) []any {
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
	return []any{now, args, kinds, attempts, metadata, priorities, queues, scheduled, states}
}

// NewJobInsert is the body of a data-modifying CTE of a caller's
// statement that inserts, for each row of from (a FROM item of that
// statement), one job as River's insert (InsertTx, InsertManyTx) writes a
// job without unique options, scheduled time or metadata: state
// available, created_at and scheduled_at the database's now() (River's
// insert leaves both to the database when no time is stubbed), priority 1
// (River's default), metadata {}, no tags, NULL unique columns. args (a
// jsonb), kind, queue and maxAttempts (a smallint) are SQL expressions over
// from's columns or the statement's parameters; the caller checks them as
// River's insert would (River's queue-name rule, ValidQueueName). It
// returns the jobs' ids. One statement can so write a feature's own row
// and the job that runs it (the inbox's batch and its job: one round trip).
func NewJobInsert(from, args, kind, queue, maxAttempts string) string {
	return `INSERT INTO /*schema*/river_job (args, created_at, kind, max_attempts, metadata, priority, queue, scheduled_at, state, tags)
    SELECT ` + args + `, now(), ` + kind + `, ` + maxAttempts + `, '{}'::jsonb, 1, ` + queue + `, now(), 'available'::/*schema*/river_job_state, '{}'::varchar(255)[]
    FROM ` + from + `
    RETURNING id`
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
