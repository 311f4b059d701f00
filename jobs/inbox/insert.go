package inbox

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tributary-run/tributary/internal/riverjob"
	"github.com/tributary-run/tributary/migrations"
	"github.com/tributary-run/tributary/queue"
)

// BatchKind is the River job kind that runs a batch row: its args are the
// inbox, the row's id, and the range of its messages the job runs.
const BatchKind = "tributary.inbox.batch"

// batchArgs are a batch job's args: tiny, the messages stay in the row.
type batchArgs struct {
	Inbox string `json:"inbox"`
	Batch int64  `json:"batch"`
	// From is the first message of the row the job runs; Count how many,
	// up to the row's last.
	From  int `json:"from"`
	Count int `json:"count"`
}

// Kind implements river.JobArgs.
func (batchArgs) Kind() string { return BatchKind }

// insertBatchSQL writes a batch row and the job that runs it in one
// statement, one round trip: the row's id is drawn first, so the job's
// args can name it and the row its job. The job is the one River's insert
// would write for batchArgs (riverjob.NewJobInsert;
// TestInsertWritesWhatRiverWrites).
var insertBatchSQL = `
WITH b AS (
    SELECT nextval('/*schema*/tributary_inbox_batch_id_seq'::regclass) AS id
), j AS (
    ` + riverjob.NewJobInsert("b",
	"jsonb_build_object('inbox', $1::text, 'batch', b.id, 'from', 0, 'count', $2::integer)",
	"'"+BatchKind+"'", "$3::text", "$4::smallint") + `
)
INSERT INTO /*schema*/tributary_inbox_batch (id, inbox, count, messages, job_id, created_at) OVERRIDING SYSTEM VALUE
SELECT b.id, $1, $2, $5, j.id, $6 FROM b, j
RETURNING id`

// Writer writes one inbox's batches into one schema.
type Writer struct {
	ib     *Inbox
	schema string
	insert string
}

// Writer returns a writer of ib's batches into schema's tables ("" is
// "public").
func (ib *Inbox) Writer(schema string) (*Writer, error) {
	if schema == "" {
		schema = queue.SchemaDefault
	}
	if err := migrations.ValidateSchemaName(schema); err != nil {
		return nil, err
	}
	return &Writer{ib: ib, schema: schema, insert: queue.Qualify(schema, insertBatchSQL)}, nil
}

// Inbox returns the inbox w writes for.
func (w *Writer) Inbox() *Inbox { return w.ib }

// InsertTx writes b as one batch of the inbox in tx: its row and the job
// that runs it, in one statement. It returns the row's id; an empty batch
// writes nothing and returns 0. River's producers are not woken: call Wake
// once tx committed (a NOTIFY inside a writing transaction holds
// PostgreSQL's notify lock through its commit).
func (w *Writer) InsertTx(ctx context.Context, tx pgx.Tx, b *Batch) (int64, error) {
	if b.Len() == 0 {
		return 0, nil
	}
	var id int64
	err := tx.QueryRow(ctx, w.insert, w.args(b)...).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("error inserting a batch of %d messages into inbox %q: %w", b.Len(), w.ib.cfg.Name, err)
	}
	return id, nil
}

// InsertStatement is InsertTx's statement and arguments for b, for a
// caller that sends them itself, with other statements in one round trip
// (amqpbridge.Statements). The arguments hold b's buffer: b must not
// change or be released until they were sent. An empty batch has no
// statement ("").
func (w *Writer) InsertStatement(b *Batch) (sql string, args []any) {
	if b.Len() == 0 {
		return "", nil
	}
	return w.insert, w.args(b)
}

func (w *Writer) args(b *Batch) []any {
	return []any{w.ib.cfg.Name, int32(b.Len()), w.ib.cfg.Queue, riverjob.MaxAttempts(w.ib.cfg.MaxAttempts), b.Bytes(), time.Now().UTC()}
}

// InsertMessagesTx writes msgs as batches of the inbox in tx, in order, a
// batch row for each BatchBytesMax of them, and returns how many batches
// it wrote. A message the inbox cannot hold (Batch.Add) fails the call,
// naming it. Wake River's producers once tx committed.
func (w *Writer) InsertMessagesTx(ctx context.Context, tx pgx.Tx, msgs []Message) (int, error) {
	b := NewBatch()
	defer b.Release()
	n := 0
	for i := range msgs {
		if err := b.Add(&msgs[i]); err != nil {
			return n, err
		}
		if b.Size() >= BatchBytesMax || i == len(msgs)-1 {
			if _, err := w.InsertTx(ctx, tx, b); err != nil {
				return n, err
			}
			n++
			b.Reset()
		}
	}
	return n, nil
}

// WakeStatement is Wake as a statement and its arguments, for a caller
// that sends it after the commit in the same round trip as its inserts
// (amqpbridge.Statements.AfterCommit).
func (w *Writer) WakeStatement() (sql string, args []any) {
	// Cannot fail: one queue name, which the inbox's config validated.
	sql, args, _ = riverjob.WakeStatement(w.schema, []string{w.ib.cfg.Queue})
	return sql, args
}

// Wake tells River's producers of the inbox's queue, in every process,
// that batches are waiting, as River's own insert does. Send it after the
// commit that wrote them, on db (a pool); without it they are found at the
// producers' next poll.
func (w *Writer) Wake(ctx context.Context, db queue.DBTX) error {
	return riverjob.Wake(ctx, db, w.schema, []string{w.ib.cfg.Queue})
}
