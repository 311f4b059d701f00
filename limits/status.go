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

// ErrUnknownLimit is what SetMax and ResetMax return for a name no process
// has declared in the schema.
var ErrUnknownLimit = errors.New("unknown limit")

// Status is one limit as `tributary limits list` shows it.
type Status struct {
	Name   string `json:"name"`
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
	// Total is the cap over all keys (0: none).
	Total int `json:"total,omitempty"`
	// Rate and Period are the rate limit (0: none); Started the weight of
	// the starts within the period and of the jobs admitted to start, over
	// all keys.
	Rate    int           `json:"rate,omitempty"`
	Period  time.Duration `json:"period,omitempty"`
	Started int64         `json:"started,omitempty"`
	// Used counts the limit's jobs holding a slot (running or available,
	// about to run), over all keys; BusiestKeyUsed the most one key holds.
	Used           int `json:"used"`
	BusiestKeyUsed int `json:"busiest_key_used"`
	// Keys counts the partition keys with a job holding a slot or waiting.
	Keys int `json:"keys"`
	// Waiting counts the due pending jobs; OldestWaitingJobID and
	// OldestWaitingSince name the pending job scheduled first.
	Waiting            int        `json:"waiting"`
	OldestWaitingJobID *int64     `json:"oldest_waiting_job_id,omitempty"`
	OldestWaitingSince *time.Time `json:"oldest_waiting_since,omitempty"`
	UpdatedAt          time.Time  `json:"updated_at"`
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
		err := r.Scan(&s.Name, &s.Kind, &s.Queue, &s.KeyArg, &s.DeclaredMax, &s.Override, &s.Total, &s.Rate, &periodMS, &s.OnBusy, &s.UpdatedAt)
		s.Max = s.DeclaredMax
		if s.Override != nil {
			s.Max = *s.Override
		}
		if s.Rate > 0 {
			s.Period = time.Duration(periodMS) * time.Millisecond
		}
		return s, err
	})
	if err != nil {
		return nil, fmt.Errorf("error listing limits: %w", err)
	}
	for i := range out {
		s := &out[i]
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

// SetMax overrides limit name's Max in schema, for every process, until
// ResetMax; 0 admits nothing (a pause). Admitters apply it at their next
// pass (at most PollInterval later); lowering it stops nothing that runs.
func SetMax(ctx context.Context, db queue.DBTX, schema, name string, n int) error {
	if n < 0 {
		return fmt.Errorf("limit %q: max %d must not be negative", name, n)
	}
	return setOverride(ctx, db, schema, name, &n)
}

// ResetMax drops limit name's override: the declared Max applies again.
func ResetMax(ctx context.Context, db queue.DBTX, schema, name string) error {
	return setOverride(ctx, db, schema, name, nil)
}

func setOverride(ctx context.Context, db queue.DBTX, schema, name string, n *int) error {
	tag, err := db.Exec(ctx, newStatements(schema).setOverride, name, n)
	if err != nil {
		return fmt.Errorf("error setting the max of limit %q: %w", name, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("%w %q: no process declared it in schema %q", ErrUnknownLimit, name, schema)
	}
	// The admitters look at the limit now rather than at their next poll.
	if _, err := db.Exec(ctx, `SELECT pg_notify($1, $2)`, schema+".tributary_limit", name); err != nil {
		return fmt.Errorf("error notifying the admitters of limit %q: %w", name, err)
	}
	return nil
}
