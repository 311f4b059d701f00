package scheduler

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/tributary-run/tributary/internal/riverjob"
	"github.com/tributary-run/tributary/queue"
)

// The functions in this file act on the stored schedules without the code
// that declared them: the CLI and the dashboard use them.

// ErrNotFound is returned for a schedule name that is not in the table.
var ErrNotFound = errors.New("no such schedule")

// ErrOrphaned is returned when triggering a schedule no running code
// declares any more.
var ErrOrphaned = errors.New("schedule is orphaned: no longer declared in code")

// ErrPreviousRunning is returned by Trigger for an OverlapSkip schedule
// whose previous job is unfinished (TriggerOpts.Force overrides).
var ErrPreviousRunning = errors.New("the previous job of this schedule is unfinished")

// Info is a stored schedule, as listed.
type Info struct {
	Name         string          `json:"name"`
	Spec         string          `json:"spec"`
	Timezone     string          `json:"timezone"`
	Kind         string          `json:"kind"`
	Args         json.RawMessage `json:"args"`
	InsertOpts   InsertOpts      `json:"insert_opts"`
	CatchUp      CatchUp         `json:"catch_up"`
	CatchUpMax   int             `json:"catch_up_max"`
	Overlap      Overlap         `json:"overlap"`
	NextRunAt    time.Time       `json:"next_run_at"`
	LastRunAt    *time.Time      `json:"last_run_at"`
	LastJobID    *int64          `json:"last_job_id"`
	LastJobState string          `json:"last_job_state"` // River state, "deleted" after retention, "" when none
	LastOutcome  string          `json:"last_outcome"`
	FiredCount   int64           `json:"fired_count"`
	SkippedCount int64           `json:"skipped_count"`
	Paused       bool            `json:"paused"`
	Orphaned     bool            `json:"orphaned"`
	OrphanedAt   *time.Time      `json:"orphaned_at"`
	DeclaredAt   time.Time       `json:"declared_at"`
	UpdatedAt    time.Time       `json:"updated_at"`
}

// List returns every stored schedule by name.
func List(ctx context.Context, client *queue.Client) ([]Info, error) {
	rows, err := client.Pool().Query(ctx, queue.Qualify(client.Schema(), listSchedulesSQL))
	if err != nil {
		return nil, fmt.Errorf("error listing schedules: %w", err)
	}
	defer rows.Close()
	out := []Info{}
	for rows.Next() {
		var in Info
		var opts []byte
		var outcome *string
		var catchUp, overlap string
		if err := rows.Scan(&in.Name, &in.Spec, &in.Timezone, &in.Kind, &in.Args, &opts, &catchUp, &in.CatchUpMax,
			&overlap, &in.NextRunAt, &in.LastRunAt, &in.LastJobID, &outcome, &in.FiredCount,
			&in.SkippedCount, &in.Paused, &in.DeclaredAt, &in.OrphanedAt, &in.UpdatedAt); err != nil {
			return nil, fmt.Errorf("error reading schedule: %w", err)
		}
		if err := json.Unmarshal(opts, &in.InsertOpts); err != nil {
			return nil, fmt.Errorf("error decoding insert options of schedule %q: %w", in.Name, err)
		}
		in.CatchUp, in.Overlap = CatchUp(catchUp), Overlap(overlap)
		if outcome != nil {
			in.LastOutcome = *outcome
		}
		in.Orphaned = in.OrphanedAt != nil
		out = append(out, in)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("error listing schedules: %w", err)
	}
	// A schedule that never fired has no job (id 0 names none).
	states, err := riverjob.JobStates(ctx, client.Pool(), client.Schema(), out, func(in Info) int64 {
		if in.LastJobID == nil {
			return 0
		}
		return *in.LastJobID
	})
	if err != nil {
		return nil, fmt.Errorf("error listing schedules: %w", err)
	}
	for i := range out {
		if out[i].LastJobID != nil {
			out[i].LastJobState = cmp.Or(string(states[i]), "deleted")
		}
	}
	return out, nil
}

// lockedSchedule is a stored schedule locked for an action.
type lockedSchedule struct {
	spec, timezone, kind string
	args                 json.RawMessage
	opts                 InsertOpts
	overlap              Overlap
	paused               bool
	lastJobID            *int64
	orphanedAt           *time.Time
}

func lockSchedule(ctx context.Context, tx pgx.Tx, schema, name string) (*lockedSchedule, error) {
	if !utf8.ValidString(name) || strings.ContainsRune(name, 0) {
		// Postgres refuses such a parameter with an encoding error; no
		// stored name can be it.
		return nil, fmt.Errorf("%w %q", ErrNotFound, name)
	}
	var l lockedSchedule
	var opts []byte
	var overlap string
	err := tx.QueryRow(ctx, queue.Qualify(schema, lockScheduleSQL), name).Scan(
		&l.spec, &l.timezone, &l.kind, &l.args, &opts, &overlap, &l.paused, &l.lastJobID, &l.orphanedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("%w %q", ErrNotFound, name)
	}
	if err != nil {
		return nil, fmt.Errorf("error reading schedule %q: %w", name, err)
	}
	if err := json.Unmarshal(opts, &l.opts); err != nil {
		return nil, fmt.Errorf("error decoding insert options of schedule %q: %w", name, err)
	}
	l.overlap = Overlap(overlap)
	return &l, nil
}

// Pause stops a schedule from firing on every replica until Resume. A
// paused schedule can still be triggered by hand.
func Pause(ctx context.Context, client *queue.Client, name string) error {
	return pgx.BeginFunc(ctx, client.Pool(), func(tx pgx.Tx) error {
		if _, err := lockSchedule(ctx, tx, client.Schema(), name); err != nil {
			return err
		}
		now, err := dbNow(ctx, tx)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, queue.Qualify(client.Schema(), setPausedSQL), name, true, now); err != nil {
			return fmt.Errorf("error pausing schedule %q: %w", name, err)
		}
		return nil
	})
}

// Resume lets a paused schedule fire again from its next fire time after
// now: fire times that passed while it was paused are not caught up (pausing
// means not running). Resuming an unpaused schedule changes nothing.
func Resume(ctx context.Context, client *queue.Client, name string) error {
	return pgx.BeginFunc(ctx, client.Pool(), func(tx pgx.Tx) error {
		l, err := lockSchedule(ctx, tx, client.Schema(), name)
		if err != nil {
			return err
		}
		if !l.paused {
			return nil
		}
		spec, err := ParseSpec(l.spec, l.timezone)
		if err != nil {
			return fmt.Errorf("stored spec of schedule %q: %w", name, err)
		}
		now, err := dbNow(ctx, tx)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, queue.Qualify(client.Schema(), resumeSQL), name, spec.Next(now), now); err != nil {
			return fmt.Errorf("error resuming schedule %q: %w", name, err)
		}
		return nil
	})
}

// TriggerOpts tune Trigger.
type TriggerOpts struct {
	// Force inserts the job even when the schedule's overlap policy is skip
	// and its previous job is unfinished.
	Force bool
	// FiredBy is written to the job's tributary_fired_by metadata.
	//
	// Defaults to "manual".
	FiredBy string
}

// Trigger inserts the schedule's job now, from the kind, args and options
// stored in the table, without moving its next fire time. It works on
// paused schedules; it refuses orphaned ones (ErrOrphaned) and, unless
// Force, OverlapSkip schedules whose previous job is unfinished
// (ErrPreviousRunning). It returns the new job's id.
func Trigger(ctx context.Context, client *queue.Client, name string, opts TriggerOpts) (int64, error) {
	var jobID int64
	err := pgx.BeginFunc(ctx, client.Pool(), func(tx pgx.Tx) error {
		l, err := lockSchedule(ctx, tx, client.Schema(), name)
		if err != nil {
			return err
		}
		if l.orphanedAt != nil {
			return fmt.Errorf("%w (since %s): %q", ErrOrphaned, l.orphanedAt.UTC().Format(time.RFC3339), name)
		}
		if l.overlap == OverlapSkip && !opts.Force {
			isBusy, err := jobBusy(ctx, tx, client.Schema(), l.lastJobID)
			if err != nil {
				return err
			}
			if isBusy {
				return fmt.Errorf("%w (job %d) for schedule %q", ErrPreviousRunning, *l.lastJobID, name)
			}
		}
		now, err := dbNow(ctx, tx)
		if err != nil {
			return err
		}
		id, _, err := insertFire(ctx, client, tx, fireJob{
			schedule: name, kind: l.kind, args: l.args, opts: l.opts,
			fireAt: now, firedBy: cmp.Or(opts.FiredBy, "manual"), manual: true,
		})
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, queue.Qualify(client.Schema(), recordTriggerSQL), name, now, id, now); err != nil {
			return fmt.Errorf("error recording the trigger of schedule %q: %w", name, err)
		}
		jobID = id
		return nil
	})
	return jobID, err
}
