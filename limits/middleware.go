package limits

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"

	"github.com/tributary-run/tributary/internal/riverjob"
)

// middleware is the limits' River middleware, for inserts and for work.
//
// At insert it marks the jobs of declared limits: their limit and key go
// into the job's metadata, and a job that would be available or scheduled
// is inserted pending, to wait for admission. A job its inserter made
// pending itself (a workflow task waiting for its dependencies) must not
// be admitted before its inserter releases it: its limit goes into
// riverjob.LimitMetaOnRelease, and migration 0028's door makes it a
// limited job waiting for admission when it is released. An inserter may
// choose the limit (by name) or the key itself (riverjob.LimitMetaAsk).
//
// At work, a limited job that succeeded while jobs of its key wait (as its
// process's admitter last saw) is completed at once in a transaction of
// its own (river.JobCompleteTx) and the admitter is woken: River's
// completer would write the completion, and so give the slot back, up to
// 250 ms later (it batches), which would cap a key at Max jobs per quarter
// second whatever their length. With nothing waiting River's batched
// completion is the cheaper one: a transaction per job costs a commit
// each (docs/decisions/0030-flow-control.md).
type middleware struct {
	river.MiddlewareDefaults
	limits []Limit
	// completer is set by Limiter.Register, before the runtime starts.
	completer atomic.Pointer[completer]
}

// completer is what the work side needs of the process.
type completer struct {
	pool     *pgxpool.Pool
	admitter *Admitter
}

// limitedArgs stands for the args of any limited job, for JobCompleteTx,
// which reads only the job's row.
type limitedArgs struct{}

func (limitedArgs) Kind() string { return "" }

func (m *middleware) Work(ctx context.Context, job *rivertype.JobRow, doInner func(context.Context) error) error {
	if err := doInner(ctx); err != nil {
		return err
	}
	c := m.completer.Load()
	if c == nil || !bytes.Contains(job.Metadata, limitMetaName) || riverjob.OwnCompletion(ctx) || !c.admitter.anyWaiters() {
		return nil
	}
	var meta struct {
		Limit string `json:"tributary_limit"`
		Key   string `json:"tributary_limit_key"`
	}
	if json.Unmarshal(job.Metadata, &meta) != nil || meta.Limit == "" || !c.admitter.keyHasWaiters(meta.Limit, meta.Key) {
		return nil
	}
	err := pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		_, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, &river.Job[limitedArgs]{JobRow: job})
		return err
	})
	if err != nil {
		// River's completer completes it, later.
		c.admitter.logger.DebugContext(ctx, "error completing a limited job early; River completes it", "job_id", job.ID, "error", err)
		return nil
	}
	c.admitter.mark(meta.Limit)
	return nil
}

var limitMetaName = []byte(`"` + riverjob.LimitMetaName + `"`)

// limitOf is the limit a job's metadata names (riverjob.LimitMetaName),
// "" for none; metadata without the key is not decoded.
func limitOf(metadata []byte) string {
	if !bytes.Contains(metadata, limitMetaName) {
		return ""
	}
	var meta struct {
		Limit string `json:"tributary_limit"`
	}
	if json.Unmarshal(metadata, &meta) != nil {
		return ""
	}
	return meta.Limit
}

func (m *middleware) InsertMany(ctx context.Context, manyParams []*rivertype.JobInsertParams, doInner func(context.Context) ([]*rivertype.JobInsertResult, error)) ([]*rivertype.JobInsertResult, error) {
	limited := false
	for _, p := range manyParams {
		marked, err := m.mark(p, riverjob.ShortInsert(ctx))
		if err != nil {
			return nil, err
		}
		limited = limited || marked
	}
	res, err := doInner(ctx)
	if err == nil && limited {
		m.countAdmitted(res)
	}
	return res, err
}

// countAdmitted adds the limited jobs that migration 0031's trigger
// admitted at insert to this process's admitter's Stats.
func (m *middleware) countAdmitted(res []*rivertype.JobInsertResult) {
	c := m.completer.Load()
	if c == nil {
		return
	}
	for _, r := range res {
		if r == nil || r.Job == nil || r.UniqueSkippedAsDuplicate || r.Job.State != rivertype.JobStateAvailable {
			continue
		}
		if name := limitOf(r.Job.Metadata); name != "" {
			c.admitter.stats.update(name, func(st *LimitStats) { st.Admitted++ })
		}
	}
}

var limitMetaAsk = []byte(`"` + riverjob.LimitMetaAsk + `"`)

// mark applies the first matching limit, or the one the job asks for, to
// one job's insert, and reports whether it did. An event consumer's
// dispatch jobs carry their consumer's limit, if any, from the events
// package, which writes most of them by its own statements: no declared
// limit governs them by kind or queue, whichever way they are inserted.
//
// A job that would be available, inserted in a transaction of River's own
// (short: riverjob.ShortInsert), stays available, marked
// riverjob.LimitMetaAdmit: migration 0031's trigger admits it at insert
// while its key has room and sends it to pending otherwise. In a caller's
// transaction it goes to pending, for the admitter: admitting at insert
// would hold the limit's row for as long as that transaction stays open.
func (m *middleware) mark(p *rivertype.JobInsertParams, short bool) (bool, error) {
	if p.Kind == riverjob.DispatchKind || p.Kind == riverjob.DispatchBatchKind {
		return false, nil
	}
	onRelease := p.State == rivertype.JobStatePending
	if !onRelease && p.State != rivertype.JobStateAvailable && p.State != rivertype.JobStateScheduled {
		return false, nil
	}
	var ask *riverjob.LimitAsk
	meta := map[string]json.RawMessage{}
	if bytes.Contains(p.Metadata, limitMetaAsk) {
		if err := json.Unmarshal(p.Metadata, &meta); err != nil {
			return false, fmt.Errorf("reading the job's metadata: %w", err)
		}
		ask = new(riverjob.LimitAsk)
		if err := json.Unmarshal(meta[riverjob.LimitMetaAsk], ask); err != nil {
			return false, fmt.Errorf("reading the job's %s: %w", riverjob.LimitMetaAsk, err)
		}
	}
	l, ok := m.governing(p.Kind, p.Queue, ask)
	if !ok {
		if ask != nil {
			if ask.Limit != "" {
				return false, fmt.Errorf("a %s job asks for limit %q, which is not declared", p.Kind, ask.Limit)
			}
			return false, fmt.Errorf("a %s job in queue %q asks for limit key %q, and no declared limit governs it", p.Kind, p.Queue, ask.Key)
		}
		return false, nil
	}
	key, err := l.key(p.Args, p.EncodedArgs)
	if err != nil {
		return false, err
	}
	if ask != nil && ask.Key != "" {
		key = ask.Key
	}
	if ask == nil && len(p.Metadata) > 0 {
		if err := json.Unmarshal(p.Metadata, &meta); err != nil {
			return false, fmt.Errorf("limit %q: reading the job's metadata: %w", l.Name, err)
		}
	}
	name := riverjob.LimitMetaName
	if onRelease {
		name = riverjob.LimitMetaOnRelease
	}
	meta[name], _ = json.Marshal(l.Name)
	if key != "" {
		// The empty key is no key: each metadata key and value is an entry
		// in River's GIN index on metadata, at every write of the row.
		meta[riverjob.LimitMetaKey], _ = json.Marshal(key)
	}
	if p.State == rivertype.JobStateAvailable && short {
		meta[riverjob.LimitMetaAdmit] = json.RawMessage("true")
	}
	if l.Rate > 0 {
		w, err := l.weight(p.Args, p.EncodedArgs)
		if err != nil {
			return false, err
		}
		// Written even when it is 1: migration 0033's index of starts
		// holds only the jobs that carry a weight, those of rate limits.
		meta[riverjob.LimitMetaWeight], _ = json.Marshal(w)
	}
	b, err := json.Marshal(meta)
	if err != nil {
		return false, fmt.Errorf("limit %q: writing the job's metadata: %w", l.Name, err)
	}
	p.Metadata = b
	if p.State != rivertype.JobStateAvailable || !short {
		p.State = rivertype.JobStatePending
	}
	return true, nil
}

// governing is the limit of a job of kind in queue: the declared one it
// asks for by name, else the first that matches.
func (m *middleware) governing(kind, queue string, ask *riverjob.LimitAsk) (Limit, bool) {
	for _, l := range m.limits {
		if ask != nil && ask.Limit != "" {
			if l.Name == ask.Limit {
				return l, true
			}
			continue
		}
		if l.matches(kind, queue) {
			return l, true
		}
	}
	return Limit{}, false
}
