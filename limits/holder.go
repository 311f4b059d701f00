package limits

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/tributary-run/tributary/queue"
)

// Holder says what holds a limit's slots.
type Holder string

const (
	// HolderJobs: the limit's slots are its jobs in available or running
	// (the limits of Config.Limits).
	HolderJobs Holder = "jobs"
	// HolderWorkflows: the limit's slots are whole workflows, admitted and
	// not finished (a workflow concurrency key, workflow.Opts.ConcurrencyKey).
	HolderWorkflows Holder = "workflows"
)

// WorkflowPrefix begins the name of a workflow concurrency key's limit:
// "workflow:" and the key. Declared limits may not use it.
const WorkflowPrefix = "workflow:"

// WorkflowLimitName is the name of the limit of workflow concurrency key
// key.
func WorkflowLimitName(key string) string { return WorkflowPrefix + key }

// HolderAdmission is what a HolderAdmitter's pass over one limit saw and
// did: the holders holding a slot and waiting before it admitted, how many
// it admitted, and the River queues of the jobs it made available.
type HolderAdmission struct {
	Used, Waiting, Admitted int
	Queues                  []string
}

// HolderAdmitter admits the waiting holders of the limits whose slots are
// not jobs (workflow.LimitHolder for whole workflows). The holders' own
// transactions admit as slots free (a workflow's end admits the next of
// its key); an Admitter calls it for what they cannot see: an override
// that raised the limit, a key with room and holders waiting.
type HolderAdmitter interface {
	// Holder is the kind of holder it admits.
	Holder() Holder
	// AdmitTx admits, in tx, which holds the lock of limit's row, its
	// oldest waiting holders while fewer than max hold a slot.
	AdmitTx(ctx context.Context, tx pgx.Tx, limit string, max int) (HolderAdmission, error)
}

// holderUseSQL reads the use of every limit whose slots are not jobs, from
// the view of their holders' owners (migration 0036), with the max in
// force.
const holderUseSQL = `
SELECT l.name, l.holder, coalesce(l.max_override, l.declared_max), coalesce(u.used, 0), coalesce(u.waiting, 0)
FROM /*schema*/tributary_limit l LEFT JOIN /*schema*/tributary_limit_holder_use u ON u.limit_name = l.name
WHERE l.holder <> 'jobs'`

// holderOneUseSQL is holderUseSQL's use of one limit, with its oldest
// waiting holder.
const holderOneUseSQL = `
SELECT used, waiting, oldest_waiting_id, oldest_waiting_since FROM /*schema*/tributary_limit_holder_use WHERE limit_name = $1`

// holdersDue records, for Stats, the use of every limit whose slots are
// not jobs (forgetting the idle ones) and returns the ones this admitter admits (a HolderAdmitter of
// their holder is registered) that have room and holders waiting: normally
// none, as the holders' own transactions admit.
func (a *Admitter) holdersDue(ctx context.Context) ([]string, error) {
	if len(a.holders) == 0 {
		return nil, nil
	}
	rows, err := a.pool.Query(ctx, queue.Qualify(a.schema, holderUseSQL))
	if err != nil {
		return nil, fmt.Errorf("error reading the use of workflow limits: %w", err)
	}
	var due []string
	var name string
	var holder Holder
	var maxN, used, waiting int
	if _, err := pgx.ForEachRow(rows, []any{&name, &holder, &maxN, &used, &waiting}, func() error {
		if a.holders[holder] == nil {
			return nil
		}
		if used == 0 && waiting == 0 {
			// An idle key has no series: keys come and go (one per
			// customer, say), their rows stay.
			a.stats.forget(name)
			return nil
		}
		a.stats.update(name, func(st *LimitStats) {
			st.Max, st.Used, st.Waiting, st.FullKeys = maxN, used, waiting, 0
			if waiting > 0 {
				st.FullKeys = 1
			}
		})
		if waiting > 0 && used < maxN {
			due = append(due, name)
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("error reading the use of workflow limits: %w", err)
	}
	return due, nil
}

// isHolderLimit reports whether limit name's slots are not jobs, by its
// name: a notification names the limit only, and the probe for waiting jobs
// would find none.
func isHolderLimit(name string) bool { return strings.HasPrefix(name, WorkflowPrefix) }

// holderPass is a pass over a limit whose slots are not jobs, in tx, which
// holds the lock of its row: its HolderAdmitter admits (none registered in
// this process: it leaves the limit to others). It returns how many it
// admitted and the River queues to wake.
func (a *Admitter) holderPass(ctx context.Context, tx pgx.Tx, name string, holder Holder, maxN int) (int, []string, error) {
	h := a.holders[holder]
	if h == nil {
		return 0, nil, nil
	}
	res, err := h.AdmitTx(ctx, tx, name, maxN)
	if err != nil {
		return 0, nil, fmt.Errorf("error admitting the %s of limit %q: %w", holder, name, err)
	}
	a.stats.update(name, func(st *LimitStats) {
		st.Max, st.Used, st.Waiting = maxN, res.Used+res.Admitted, res.Waiting-res.Admitted
		st.FullKeys = 0
		if st.Waiting > 0 {
			st.FullKeys = 1
		}
		st.Admitted += uint64(res.Admitted)
		st.Passes++
	})
	if res.Admitted > 0 {
		a.logger.DebugContext(ctx, "admitted waiting holders", "limit", name, "holder", holder, "count", res.Admitted)
	}
	return res.Admitted, res.Queues, nil
}
