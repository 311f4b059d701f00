package events

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/tributary-run/tributary/migrations"
	"github.com/tributary-run/tributary/outbox"
	"github.com/tributary-run/tributary/queue"
)

// MaxPayloadBytesDefault is the payload size limit when EmitterConfig sets
// none: 1 MiB of JSON.
const MaxPayloadBytesDefault = 1 << 20

// EmitterConfig configures an Emitter.
type EmitterConfig struct {
	// Schema holds tributary's tables. Defaults to "public".
	Schema string

	// Registry is the set of event types the emitter accepts. Required.
	Registry *Registry

	// MaxPayloadBytes bounds the JSON size of one payload; bigger payloads
	// fail at emit time. Defaults to 1 MiB.
	MaxPayloadBytes int

	// SourceService names the emitting service; it travels with every event
	// (consumers can skip their own service's events by kind).
	//
	// Defaults to empty.
	SourceService string

	// NoNotify leaves out the NOTIFY that wakes the forwarders at commit;
	// they then find the events on their next poll (ForwarderConfig's
	// PollInterval). Postgres serialises the commits of all transactions
	// that NOTIFY, fsync included, so under many concurrent emitting
	// transactions the notification caps the commit rate of the whole
	// database; polling does not.
	//
	// Defaults to false: every emitting transaction notifies.
	NoNotify bool

	// NowFunc returns the time written as created_at. Defaults to time.Now.
	NowFunc func() time.Time
}

// Meta is what travels with an event besides its payload.
type Meta struct {
	// AggregateID is the entity the event is about. Events with the same
	// aggregate id are handled by each consumer one at a time, in emit
	// order. Empty: no ordering.
	AggregateID string
	// CorrelationID ties together everything caused by one request.
	CorrelationID string
	// CausationID is the id of the message that caused this event.
	CausationID string
	// Actor is who or what caused the event.
	Actor string
	// Extra carries application-defined attributes.
	Extra map[string]string
}

// Emission is one event of an EmitManyTx call.
type Emission struct {
	Def     Definition
	Payload any
	Meta    Meta
}

// PayloadTooLargeError is an event payload over the emitter's limit.
type PayloadTooLargeError struct {
	EventType string
	Size      int
	Limit     int
}

func (e *PayloadTooLargeError) Error() string {
	return fmt.Sprintf("payload of event %s is %d bytes, over the limit of %d bytes", e.EventType, e.Size, e.Limit)
}

// NotStorableError is an event the emitter refuses because PostgreSQL
// would: its payload or metadata is valid JSON that jsonb cannot hold (a
// \u0000 escape, an unpaired surrogate escape, invalid UTF-8, a number
// beyond numeric's range), or its aggregate id holds a NUL byte or invalid
// UTF-8. Nothing is written, and the caller's transaction stays usable:
// the insert that would have failed, aborting it, is never sent. Err is a
// *queue.StorageError (errors.Is(err, queue.ErrNotStorable) holds).
type NotStorableError struct {
	EventType string
	// Part is "payload", "metadata" or "aggregate id".
	Part string
	Err  error
}

func (e *NotStorableError) Error() string {
	return fmt.Sprintf("%s of event %s cannot be stored: %v", e.Part, e.EventType, e.Err)
}

func (e *NotStorableError) Unwrap() error { return e.Err }

// Emitter writes events into the outbox in the caller's transaction. It is
// safe for concurrent use.
type Emitter struct {
	cfg       EmitterConfig
	insertSQL string
	channel   string
}

// NewEmitter returns an emitter for cfg.
func NewEmitter(cfg EmitterConfig) (*Emitter, error) {
	cfg.Schema = cmp.Or(cfg.Schema, queue.SchemaDefault)
	if err := migrations.ValidateSchemaName(cfg.Schema); err != nil {
		return nil, err
	}
	if cfg.Registry == nil {
		return nil, errors.New("events: EmitterConfig.Registry is required")
	}
	cfg.MaxPayloadBytes = cmp.Or(cfg.MaxPayloadBytes, MaxPayloadBytesDefault)
	if err := queue.CheckText(cfg.SourceService); err != nil {
		return nil, fmt.Errorf("events: invalid EmitterConfig.SourceService %q: %w", cfg.SourceService, err)
	}
	if cfg.NowFunc == nil {
		cfg.NowFunc = time.Now
	}
	insertSQL := outboxInsertSQL
	if cfg.NoNotify {
		insertSQL = outboxInsertNoNotifySQL
	}
	return &Emitter{cfg: cfg, insertSQL: queue.Qualify(cfg.Schema, insertSQL), channel: notifyChannel(cfg.Schema)}, nil
}

// Registry returns the emitter's registry.
func (e *Emitter) Registry() *Registry { return e.cfg.Registry }

// EmitTx writes one event in the caller's transaction and returns its id.
// The forwarder is woken when tx commits; if tx rolls back, the event never
// existed.
func (e *Emitter) EmitTx(ctx context.Context, tx pgx.Tx, def Definition, payload any, meta Meta) (string, error) {
	ids, err := e.EmitManyTx(ctx, tx, []Emission{{Def: def, Payload: payload, Meta: meta}})
	if err != nil {
		return "", err
	}
	return ids[0], nil
}

// Emit is EmitTx in a transaction of its own on db (a savepoint when db is
// a pgx.Tx), committed before it returns.
func (e *Emitter) Emit(ctx context.Context, db queue.DBTX, def Definition, payload any, meta Meta) (string, error) {
	ids, err := e.EmitMany(ctx, db, []Emission{{Def: def, Payload: payload, Meta: meta}})
	if err != nil {
		return "", err
	}
	return ids[0], nil
}

// insertOwnTx inserts rows, checked and encoded already (so bad input
// opens no transaction), in a transaction of its own on db: the aggregate
// locks the insert takes last until the rows commit. The insert is one
// statement, so outside a transaction (db a pool or a connection) it is a
// transaction of its own, committed when it returns: one round trip where
// BEGIN, the locks, the insert and COMMIT would be four. In the caller's transaction (db a pgx.Tx) it runs in a
// savepoint, so a failed insert leaves that transaction usable.
func (e *Emitter) insertOwnTx(ctx context.Context, db queue.DBTX, rows []outboxRow) ([]string, error) {
	tx, inTx := db.(pgx.Tx)
	if !inTx {
		return e.insert(ctx, db, rows)
	}
	var ids []string
	err := pgx.BeginFunc(ctx, tx, func(tx pgx.Tx) error {
		var err error
		ids, err = e.insert(ctx, tx, rows)
		return err
	})
	return ids, err
}

// ValidateJSON checks, without writing anything, what EmitJSONTx checks:
// the event type is registered, the payload is JSON that decodes strictly
// into its payload type and passes Validate, that PostgreSQL can store
// (*NotStorableError), and it is within the size limit.
func (e *Emitter) ValidateJSON(eventType string, payload json.RawMessage) error {
	def, err := e.cfg.Registry.Lookup(eventType)
	if err != nil {
		return err
	}
	if !json.Valid(payload) {
		return fmt.Errorf("payload of event %s is not valid JSON", eventType)
	}
	if err := queue.CheckJSONB(payload); err != nil {
		return &NotStorableError{EventType: eventType, Part: "payload", Err: err}
	}
	if _, err := def.decode(payload); err != nil {
		return err
	}
	if len(payload) > e.cfg.MaxPayloadBytes {
		var buf bytes.Buffer
		_ = json.Compact(&buf, payload)
		if buf.Len() > e.cfg.MaxPayloadBytes {
			return &PayloadTooLargeError{EventType: eventType, Size: buf.Len(), Limit: e.cfg.MaxPayloadBytes}
		}
	}
	return nil
}

// EmitJSONTx writes one event whose payload is raw JSON in the caller's
// transaction, for callers that only know the event type by name (the CLI,
// bridges). The JSON must decode strictly into the registered payload type
// and pass its Validate.
func (e *Emitter) EmitJSONTx(ctx context.Context, tx pgx.Tx, eventType string, payload json.RawMessage, meta Meta) (string, error) {
	row, err := e.jsonRow(eventType, payload, meta)
	if err != nil {
		return "", err
	}
	ids, err := e.insert(ctx, tx, []outboxRow{row})
	if err != nil {
		return "", err
	}
	return ids[0], nil
}

// EmitJSON is EmitJSONTx in a transaction of its own on db.
func (e *Emitter) EmitJSON(ctx context.Context, db queue.DBTX, eventType string, payload json.RawMessage, meta Meta) (string, error) {
	row, err := e.jsonRow(eventType, payload, meta)
	if err != nil {
		return "", err
	}
	ids, err := e.insertOwnTx(ctx, db, []outboxRow{row})
	if err != nil {
		return "", err
	}
	return ids[0], nil
}

func (e *Emitter) jsonRow(eventType string, payload json.RawMessage, meta Meta) (outboxRow, error) {
	def, err := e.cfg.Registry.Lookup(eventType)
	if err != nil {
		return outboxRow{}, err
	}
	if !json.Valid(payload) {
		return outboxRow{}, fmt.Errorf("payload of event %s is not valid JSON", eventType)
	}
	if _, err := def.decode(payload); err != nil {
		return outboxRow{}, err
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, payload); err != nil {
		return outboxRow{}, fmt.Errorf("payload of event %s: %w", eventType, err)
	}
	return e.row(def, buf.Bytes(), meta)
}

// EmitManyTx writes several events in the caller's transaction with one
// statement, in order, and returns their ids. Either all are written or
// none.
func (e *Emitter) EmitManyTx(ctx context.Context, tx pgx.Tx, items []Emission) ([]string, error) {
	rows, err := e.rows(items)
	if err != nil || len(rows) == 0 {
		return nil, err
	}
	return e.insert(ctx, tx, rows)
}

// EmitMany is EmitManyTx in a transaction of its own on db.
func (e *Emitter) EmitMany(ctx context.Context, db queue.DBTX, items []Emission) ([]string, error) {
	rows, err := e.rows(items)
	if err != nil || len(rows) == 0 {
		return nil, err
	}
	return e.insertOwnTx(ctx, db, rows)
}

// rows checks and encodes items, before anything is written.
func (e *Emitter) rows(items []Emission) ([]outboxRow, error) {
	rows := make([]outboxRow, len(items))
	for i, it := range items {
		raw, err := e.encode(it.Def, it.Payload)
		if err == nil {
			rows[i], err = e.row(it.Def, raw, it.Meta)
		}
		if err != nil {
			if len(items) > 1 {
				return nil, fmt.Errorf("event %d: %w", i, err)
			}
			return nil, err
		}
	}
	return rows, nil
}

// encode checks def against the registry and payload against def, then
// marshals and size-checks the payload.
func (e *Emitter) encode(def Definition, payload any) ([]byte, error) {
	if def == nil {
		return nil, errors.New("event definition is nil")
	}
	reg, err := e.cfg.Registry.Lookup(def.Name())
	if err != nil {
		return nil, err
	}
	if reg.Version() != def.Version() || reg.payloadType() != def.payloadType() {
		return nil, fmt.Errorf("%w %q version %d with payload %s (the registry holds version %d with payload %s)",
			ErrUnknownEventType, def.Name(), def.Version(), def.payloadType(), reg.Version(), reg.payloadType())
	}
	want := def.payloadType()
	pv := reflect.ValueOf(payload)
	switch {
	case !pv.IsValid():
		return nil, fmt.Errorf("payload of event %s is nil", def.Name())
	case pv.Type() == want:
	case pv.Kind() == reflect.Pointer && pv.Type().Elem() == want && !pv.IsNil():
		payload = pv.Elem().Interface()
	default:
		return nil, fmt.Errorf("payload of event %s has type %s, want %s", def.Name(), pv.Type(), want)
	}
	ptr := reflect.New(want)
	ptr.Elem().Set(reflect.ValueOf(payload))
	if err := validate(ptr.Interface()); err != nil {
		return nil, fmt.Errorf("payload of event %s is invalid: %w", def.Name(), err)
	}
	raw, err := json.Marshal(payload)
	if err != nil {
		return nil, fmt.Errorf("error encoding payload of event %s: %w", def.Name(), err)
	}
	return raw, nil
}

func (e *Emitter) row(def Definition, raw []byte, meta Meta) (outboxRow, error) {
	if len(raw) > e.cfg.MaxPayloadBytes {
		return outboxRow{}, &PayloadTooLargeError{EventType: def.Name(), Size: len(raw), Limit: e.cfg.MaxPayloadBytes}
	}
	if err := queue.CheckJSONB(raw); err != nil {
		return outboxRow{}, &NotStorableError{EventType: def.Name(), Part: "payload", Err: err}
	}
	if err := queue.CheckText(meta.AggregateID); err != nil {
		return outboxRow{}, &NotStorableError{EventType: def.Name(), Part: "aggregate id", Err: err}
	}
	md, err := json.Marshal(outbox.Metadata{
		CorrelationID: meta.CorrelationID,
		CausationID:   meta.CausationID,
		Actor:         meta.Actor,
		Extra:         meta.Extra,
	})
	if err != nil {
		return outboxRow{}, fmt.Errorf("error encoding metadata of event %s: %w", def.Name(), err)
	}
	if err := queue.CheckJSONB(md); err != nil {
		return outboxRow{}, &NotStorableError{EventType: def.Name(), Part: "metadata", Err: err}
	}
	id, err := uuid.NewV7()
	if err != nil {
		return outboxRow{}, fmt.Errorf("error generating event id: %w", err)
	}
	r := outboxRow{
		id:        id.String(),
		eventType: def.Name(),
		version:   int32(def.Version()),
		kind:      string(def.EventKind()),
		payload:   string(raw),
		metadata:  string(md),
	}
	if meta.AggregateID != "" {
		agg := meta.AggregateID
		r.aggregateID = &agg
	}
	return r, nil
}

type outboxRow struct {
	id          string
	eventType   string
	version     int32
	kind        string
	aggregateID *string
	payload     string
	metadata    string
}

// insert writes rows with one statement on db, which takes their
// aggregates' locks (see outboxInsertNoNotifySQL) and, unless NoNotify,
// queues the forwarders' notification.
func (e *Emitter) insert(ctx context.Context, db queue.DBTX, rows []outboxRow) (_ []string, err error) {
	ctx, span, err := startEmitSpan(ctx, rows)
	defer func() { endSpan(span, err) }()
	if err != nil {
		return nil, err
	}
	n := len(rows)
	ids := make([]string, n)
	types := make([]string, n)
	versions := make([]int32, n)
	kinds := make([]string, n)
	aggs := make([]*string, n)
	payloads := make([]string, n)
	metas := make([]string, n)
	for i, r := range rows {
		ids[i], types[i], versions[i], kinds[i], aggs[i], payloads[i], metas[i] = r.id, r.eventType, r.version, r.kind, r.aggregateID, r.payload, r.metadata
	}
	now := e.cfg.NowFunc().UTC()
	args := []any{ids, types, versions, kinds, aggs, payloads, metas, e.cfg.SourceService, now}
	if !e.cfg.NoNotify {
		args = append(args, e.channel)
	}
	if _, err := db.Exec(ctx, e.insertSQL, args...); err != nil {
		return nil, fmt.Errorf("error writing %d event(s) to the outbox: %w", n, err)
	}
	return ids, nil
}

// outboxInsertNoNotifySQL inserts rows in emit order, after taking a
// transaction-level advisory lock per aggregate the rows are about, in
// byte order (the locked CTE, read by the one-time filter before any row
// is produced and so before any row gets its position).
//
// Emit order is the outbox position, an identity value assigned at insert,
// not at commit. Without the lock, two transactions emitting for one
// aggregate at once could commit in the opposite order of their positions,
// and the forwarder, which cannot see the uncommitted earlier row, would
// deliver the later event first. With it, a second emitter for the
// aggregate waits until the first commits or rolls back, so position order
// and commit order agree (TestEmitPositionFollowsTheAggregateLock). (Apps
// that lock the aggregate's own row already serialise this way; the lock
// makes it hold for all.) The order of the locks keeps two emitters from
// waiting on each other in a cycle within one call; a transaction that
// emits for aggregates A then B in two calls while another emits for B
// then A can deadlock, and Postgres aborts one of them with a deadlock
// error. The lock and the insert are one statement: one round trip, not
// two.
const outboxInsertNoNotifySQL = `
WITH locked AS MATERIALIZED (
    SELECT count(pg_advisory_xact_lock(hashtextextended('tributary.emit.' || k.a, 0))) AS n
    FROM (SELECT DISTINCT a COLLATE "C" AS a FROM unnest($5::text[]) AS a WHERE a IS NOT NULL ORDER BY 1) AS k
)
INSERT INTO /*schema*/tributary_outbox
    (id, event_type, event_version, event_kind, aggregate_id, payload, metadata,
     source_service, status, retry_count, created_at)
SELECT u.id::uuid, u.event_type, u.event_version, u.event_kind, u.aggregate_id, u.payload::jsonb, u.metadata::jsonb,
       $8, 'PENDING', 0, $9
FROM unnest($1::text[], $2::text[], $3::int[], $4::text[], $5::text[], $6::text[], $7::text[])
    WITH ORDINALITY AS u(id, event_type, event_version, event_kind, aggregate_id, payload, metadata, ord)
WHERE (SELECT n FROM locked) >= 0
ORDER BY u.ord`

// outboxInsertSQL is the same insert queueing one notification, which
// Postgres delivers when the transaction commits; its payload names the
// forward loop to wake (emitWakeSQL).
var outboxInsertSQL = `
WITH ins AS (` + outboxInsertNoNotifySQL + `
RETURNING 1
)
SELECT pg_notify($10, ` + emitWakeSQL + `) FROM (SELECT 1 FROM ins LIMIT 1) AS one`
