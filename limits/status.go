package limits

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tributary-run/tributary/internal/riverjob"
	"github.com/tributary-run/tributary/queue"
)

// ErrUnknownLimit is what Set, Reset, SetMax and ResetMax return for a
// name no process has declared in the schema.
var ErrUnknownLimit = errors.New("unknown limit")

// ErrNoRate is what Set returns for a rate or a period override of a limit
// that declares no Rate.
var ErrNoRate = errors.New("declares no Rate")

// ErrNotOverridable is what Set returns for a total override of a workflow
// concurrency key's limit (one key: its max is the only cap).
var ErrNotOverridable = errors.New("not overridable")

// Status is one limit as `tributary limits list` shows it.
type Status struct {
	Name string `json:"name"`
	// Holder is what holds its slots: jobs, or whole workflows (the limit
	// of a workflow concurrency key, named WorkflowPrefix and the key,
	// whose DeclaredMax the key's latest workflow declares).
	Holder Holder `json:"holder"`
	Kind   string `json:"kind,omitempty"`
	Queue  string `json:"queue,omitempty"`
	KeyArg string `json:"key_arg,omitempty"`
	// DeclaredMax is what the code declares; Override what `limits set`
	// put in its place (nil: none); Max the one in force (0 on a rate
	// limit or a Total declared without one: no cap).
	DeclaredMax int  `json:"declared_max"`
	Override    *int `json:"override,omitempty"`
	Max         int  `json:"max"`
	// OnBusy is the busy-key strategy ("": queue).
	OnBusy Busy `json:"on_busy,omitempty"`
	// Total is the cap over all keys in force (0: none); DeclaredTotal
	// what the code declares, TotalOverride what `limits set --total` put
	// in its place (nil: none).
	Total         int  `json:"total,omitempty"`
	DeclaredTotal int  `json:"declared_total,omitempty"`
	TotalOverride *int `json:"total_override,omitempty"`
	// Rate and Period are the rate limit in force (0: none), the
	// overrides if set (RateOverride, PeriodOverride: `limits set --rate
	// --period`), else the declaration (DeclaredRate, DeclaredPeriod);
	// Started the weight of the starts within the period and of the jobs
	// admitted to start, over all keys.
	Rate           int            `json:"rate,omitempty"`
	Period         time.Duration  `json:"period,omitempty"`
	DeclaredRate   int            `json:"declared_rate,omitempty"`
	DeclaredPeriod time.Duration  `json:"declared_period,omitempty"`
	RateOverride   *int           `json:"rate_override,omitempty"`
	PeriodOverride *time.Duration `json:"period_override,omitempty"`
	Started        int64          `json:"started,omitempty"`
	// Used counts the limit's jobs holding a slot (running or available,
	// about to run), over all keys, or its admitted unfinished workflows;
	// BusiestKeyUsed the most one key holds.
	Used           int `json:"used"`
	BusiestKeyUsed int `json:"busiest_key_used"`
	// Keys counts the partition keys with a job holding a slot or waiting.
	Keys int `json:"keys"`
	// Waiting counts the due pending jobs (or queued workflows);
	// OldestWaitingJobID and OldestWaitingSince name the pending job
	// scheduled first, OldestWaitingWorkflowID the workflow queued first.
	Waiting                 int        `json:"waiting"`
	OldestWaitingJobID      *int64     `json:"oldest_waiting_job_id,omitempty"`
	OldestWaitingWorkflowID string     `json:"oldest_waiting_workflow_id,omitempty"`
	OldestWaitingSince      *time.Time `json:"oldest_waiting_since,omitempty"`
	UpdatedAt               time.Time  `json:"updated_at"`
}

// Overridden reports whether any of the limit's values is overridden.
func (s Status) Overridden() bool {
	return s.Override != nil || s.TotalOverride != nil || s.RateOverride != nil || s.PeriodOverride != nil
}

// List returns every limit declared in schema with its use.
func List(ctx context.Context, db queue.DBTX, schema string) ([]Status, error) {
	sql := newStatements(schema)
	rows, err := db.Query(ctx, sql.list)
	if err != nil {
		return nil, fmt.Errorf("error listing limits: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Status, error) {
		var s Status
		var periodMS int64
		var periodOverrideMS *int64
		err := r.Scan(&s.Name, &s.Kind, &s.Queue, &s.KeyArg, &s.DeclaredMax, &s.Override, &s.DeclaredTotal, &s.TotalOverride,
			&s.DeclaredRate, &s.RateOverride, &periodMS, &periodOverrideMS, &s.OnBusy, &s.UpdatedAt, &s.Holder)
		s.Max = s.DeclaredMax
		if s.Override != nil {
			s.Max = *s.Override
		}
		s.Total = s.DeclaredTotal
		if s.TotalOverride != nil {
			s.Total = *s.TotalOverride
		}
		s.Rate = s.DeclaredRate
		if s.RateOverride != nil {
			s.Rate = *s.RateOverride
		}
		if s.DeclaredRate > 0 {
			s.DeclaredPeriod = time.Duration(periodMS) * time.Millisecond
			s.Period = s.DeclaredPeriod
		}
		if periodOverrideMS != nil {
			d := time.Duration(*periodOverrideMS) * time.Millisecond
			s.PeriodOverride, s.Period = &d, d
		}
		return s, err
	})
	if err != nil {
		return nil, fmt.Errorf("error listing limits: %w", err)
	}
	for i := range out {
		s := &out[i]
		if s.Holder != HolderJobs {
			if err := holderStatus(ctx, db, schema, s); err != nil {
				return nil, err
			}
			continue
		}
		use, err := riverjob.LimitUse(ctx, db, schema, s.Name, s.Period)
		if err != nil {
			return nil, err
		}
		for _, u := range use {
			s.Used += u.Used
			s.Waiting += u.Waiting
			s.BusiestKeyUsed = max(s.BusiestKeyUsed, u.Used)
			s.Started += u.Started
		}
		s.Keys = len(use)
		if s.OldestWaitingJobID, s.OldestWaitingSince, err = riverjob.LimitOldestWaiting(ctx, db, schema, s.Name); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// holderStatus fills the use of a limit whose slots are not jobs.
func holderStatus(ctx context.Context, db queue.DBTX, schema string, s *Status) error {
	var oldest *string
	err := db.QueryRow(ctx, queue.Qualify(schema, holderOneUseSQL), s.Name).Scan(&s.Used, &s.Waiting, &oldest, &s.OldestWaitingSince)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil // nothing holds or waits
	}
	if err != nil {
		return fmt.Errorf("error reading the use of limit %q: %w", s.Name, err)
	}
	s.Keys, s.BusiestKeyUsed = 1, s.Used
	if oldest != nil {
		s.OldestWaitingWorkflowID = *oldest
	}
	return nil
}

// Override puts run-time values in place of a limit's declared ones, for
// every process, until Reset. A nil field leaves that value as it is (an
// override set before stays).
type Override struct {
	// Max is the per-key cap; 0 admits nothing (a pause).
	Max *int
	// Total is the cap over all keys, at least 1.
	Total *int
	// Rate is the starts (by weight) a period may hold, at least 1; only
	// for a limit that declares a Rate. A job weighing more than the rate
	// in force waits until it is raised or reset.
	Rate *int
	// Period is the rate's window, at least 1 ms; only for a limit that
	// declares a Rate.
	Period *time.Duration
}

// validate checks o's values and names the bad one.
func (o Override) validate(name string) error {
	switch {
	case o.Max == nil && o.Total == nil && o.Rate == nil && o.Period == nil:
		return fmt.Errorf("limit %q: nothing to override: give a max, a total, a rate or a period", name)
	case o.Max != nil && *o.Max < 0:
		return fmt.Errorf("limit %q: max %d must not be negative", name, *o.Max)
	case o.Total != nil && *o.Total < 1:
		return fmt.Errorf("limit %q: total %d must be at least 1 (a max of 0 pauses the limit)", name, *o.Total)
	case o.Rate != nil && *o.Rate < 1:
		return fmt.Errorf("limit %q: rate %d must be at least 1 (a max of 0 pauses the limit)", name, *o.Rate)
	case o.Period != nil && *o.Period < time.Millisecond:
		return fmt.Errorf("limit %q: period %s must be at least 1ms", name, *o.Period)
	}
	return nil
}

// Set overrides limit name's values in schema, for every process, until
// Reset. Admitters apply them at their next pass (a notification makes it
// at once; at most PollInterval later): raising one admits more, lowering
// one stops nothing that runs, it admits no more until the use is below
// it. A rate or a period needs a limit that declares a Rate.
func Set(ctx context.Context, db queue.DBTX, schema, name string, o Override) error {
	if err := o.validate(name); err != nil {
		return err
	}
	var periodMS *int64
	if o.Period != nil {
		ms := o.Period.Milliseconds()
		periodMS = &ms
	}
	sql := newStatements(schema)
	err := db.QueryRow(ctx, sql.setOverride, name, o.Max, o.Total, o.Rate, periodMS).Scan(new(string))
	if errors.Is(err, pgx.ErrNoRows) {
		var rate int
		var holder Holder
		switch err := db.QueryRow(ctx, sql.exists, name).Scan(&rate, &holder); {
		case errors.Is(err, pgx.ErrNoRows):
			return unknown(schema, name)
		case err != nil:
			return fmt.Errorf("error overriding limit %q: %w", name, err)
		case rate == 0 && (o.Rate != nil || o.Period != nil):
			return fmt.Errorf("limit %q %w: a rate or period override needs one", name, ErrNoRate)
		}
		return fmt.Errorf("limit %q of %s: %w: only its max can be overridden", name, holder, ErrNotOverridable)
	}
	if err != nil {
		return fmt.Errorf("error overriding limit %q: %w", name, err)
	}
	return notifyAdmitters(ctx, db, schema, name)
}

// Reset drops every override of limit name: its declared values apply
// again.
func Reset(ctx context.Context, db queue.DBTX, schema, name string) error {
	return reset(ctx, db, schema, name, newStatements(schema).resetOverrides)
}

// SetMax overrides limit name's Max in schema, for every process, until
// ResetMax or Reset; 0 admits nothing (a pause). It is Set with a Max.
func SetMax(ctx context.Context, db queue.DBTX, schema, name string, n int) error {
	return Set(ctx, db, schema, name, Override{Max: &n})
}

// ResetMax drops limit name's override of Max: the declared Max applies
// again (other overrides stay).
func ResetMax(ctx context.Context, db queue.DBTX, schema, name string) error {
	return reset(ctx, db, schema, name, newStatements(schema).resetMax)
}

func reset(ctx context.Context, db queue.DBTX, schema, name, statement string) error {
	err := db.QueryRow(ctx, statement, name).Scan(new(string))
	if errors.Is(err, pgx.ErrNoRows) {
		return unknown(schema, name)
	}
	if err != nil {
		return fmt.Errorf("error resetting limit %q: %w", name, err)
	}
	return notifyAdmitters(ctx, db, schema, name)
}

func unknown(schema, name string) error {
	return fmt.Errorf("%w %q: no process declared it in schema %q", ErrUnknownLimit, name, schema)
}

// notifyAdmitters makes the admitters look at the limit now rather than at
// their next poll.
func notifyAdmitters(ctx context.Context, db queue.DBTX, schema, name string) error {
	if _, err := db.Exec(ctx, `SELECT pg_notify($1, $2)`, schema+".tributary_limit", name); err != nil {
		return fmt.Errorf("error notifying the admitters of limit %q: %w", name, err)
	}
	return nil
}
