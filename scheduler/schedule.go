package scheduler

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"

	"github.com/riverqueue/river"
)

// CatchUp is what a schedule does with fire times that passed while no
// scheduler ran (every replica down, or the schedule's row locked by a
// replica that died mid-fire).
type CatchUp string

const (
	// CatchUpSkip drops missed fire times. The newest one still fires if it
	// is no older than Config.MisfireGrace, so a replica restarting a few
	// seconds late does not lose a daily run.
	CatchUpSkip CatchUp = "skip"
	// CatchUpOnce inserts one job for all missed fire times, carrying the
	// newest fire time. This is the default.
	CatchUpOnce CatchUp = "once"
	// CatchUpEach inserts one job per missed fire time, at most CatchUpMax of
	// them (the newest ones); older ones are dropped.
	CatchUpEach CatchUp = "each"
)

// Overlap is what a fire does while the schedule's previous job has not
// finished.
type Overlap string

const (
	// OverlapAllow inserts the job regardless. This is the default.
	OverlapAllow Overlap = "allow"
	// OverlapSkip drops the fire while the previous job is pending,
	// scheduled, available, running or retryable.
	OverlapSkip Overlap = "skip"
)

// CatchUpMaxDefault bounds CatchUpEach when the schedule gives no bound.
const CatchUpMaxDefault = 10

// Schedule declares a job inserted on a cron spec. Declare schedules in
// code and hand them to Scheduler.Add; their state (next run, last run,
// paused) lives in the tributary_schedule table.
type Schedule struct {
	// Name identifies the schedule across deploys: letters, digits and
	// ". _ : -", at most 200 characters. Renaming a schedule makes a new one
	// (and reports the old one as orphaned).
	Name string

	// Spec is the cron expression: 5 fields, 6 with leading seconds, or a
	// descriptor such as "@every 1m" or "@daily", optionally prefixed with
	// "CRON_TZ=Europe/Berlin ".
	Spec string

	// Timezone is the IANA zone the spec is evaluated in. It may be left
	// empty when Spec has a CRON_TZ= prefix; when both are given they must
	// agree. Across daylight-saving changes a time of day the clocks skip
	// runs once just after the gap and a time that occurs twice runs once;
	// specs whose hour field is every hour follow real hours (Spec.Next).
	//
	// Defaults to UTC.
	Timezone string

	// Args is the job each fire inserts. Its kind must have a worker in the
	// processes that work the queue.
	Args river.JobArgs

	// InsertOpts sets the job's queue, priority, max attempts and tags. Zero
	// fields fall back to the args' own InsertOpts (river.JobArgsWithInsertOpts)
	// and then to River's defaults.
	InsertOpts InsertOpts

	// CatchUp is what to do with fire times missed while nothing ran.
	//
	// Defaults to CatchUpOnce.
	CatchUp CatchUp

	// CatchUpMax bounds how many missed fire times CatchUpEach inserts.
	//
	// Defaults to 10.
	CatchUpMax int

	// Overlap is what to do while the previous job of this schedule has not
	// finished.
	//
	// Defaults to OverlapAllow.
	Overlap Overlap
}

// InsertOpts are the insert options a schedule stores with its job. They
// are kept in the table, so `tributary schedules trigger` inserts the same
// job without the declaring code.
type InsertOpts struct {
	// Queue to insert into. Defaults to "default".
	Queue string `json:"queue,omitempty"`
	// Priority from 1 (first) to 4 (last). Defaults to 1.
	Priority int `json:"priority,omitempty"`
	// MaxAttempts before the job is discarded. Defaults to River's (25).
	MaxAttempts int `json:"max_attempts,omitempty"`
	// Tags attached to every job of the schedule.
	Tags []string `json:"tags,omitempty"`
}

// ScheduleError is a schedule that cannot be registered. Its message names
// the schedule, the field and the bad value.
type ScheduleError struct {
	Name  string
	Field string
	Value string
	Err   error
}

func (e *ScheduleError) Error() string {
	return fmt.Sprintf("schedule %q: invalid %s %q: %v", e.Name, e.Field, e.Value, e.Err)
}

func (e *ScheduleError) Unwrap() error { return e.Err }

// ErrDuplicateName is wrapped by the ScheduleError of a second schedule
// with a name already registered.
var ErrDuplicateName = errors.New("a schedule with this name is already registered")

var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:\-]{0,199}$`)

// declared is a validated schedule, ready to be stored.
type declared struct {
	name       string
	spec       *Spec
	kind       string
	args       json.RawMessage
	opts       InsertOpts
	optsJSON   []byte
	catchUp    CatchUp
	catchUpMax int
	overlap    Overlap
}

// compile validates s and fills its defaults.
func compile(s Schedule) (*declared, error) {
	bad := func(field, value string, err error) error {
		return &ScheduleError{Name: s.Name, Field: field, Value: value, Err: err}
	}
	if !nameRE.MatchString(s.Name) {
		return nil, bad("name", s.Name, errors.New(`use letters, digits and ". _ : -", starting with a letter or digit, at most 200 characters`))
	}
	spec, err := ParseSpec(s.Spec, s.Timezone)
	var tzErr *timezoneError
	var specErr *specError
	switch {
	case errors.As(err, &tzErr):
		return nil, bad("timezone", tzErr.name, errTimezone)
	case errors.As(err, &specErr):
		return nil, bad("spec", s.Spec, errors.New(specErr.detail))
	case err != nil:
		return nil, bad("spec", s.Spec, err)
	}
	if s.Args == nil {
		return nil, bad("args", "<nil>", errors.New("a schedule needs job args"))
	}
	kind := s.Args.Kind()
	if kind == "" {
		return nil, bad("args", fmt.Sprintf("%T", s.Args), errors.New("the args' Kind() is empty"))
	}
	args, err := json.Marshal(s.Args)
	if err != nil {
		return nil, bad("args", kind, fmt.Errorf("cannot encode them as JSON: %w", err))
	}
	opts := s.InsertOpts
	if withOpts, ok := s.Args.(river.JobArgsWithInsertOpts); ok {
		def := withOpts.InsertOpts()
		if opts.Queue == "" {
			opts.Queue = def.Queue
		}
		if opts.Priority == 0 {
			opts.Priority = def.Priority
		}
		if opts.MaxAttempts == 0 {
			opts.MaxAttempts = def.MaxAttempts
		}
		if opts.Tags == nil {
			opts.Tags = def.Tags
		}
	}
	if opts.Priority != 0 && (opts.Priority < 1 || opts.Priority > 4) {
		return nil, bad("priority", fmt.Sprint(opts.Priority), errors.New("want 1 to 4"))
	}
	if opts.MaxAttempts < 0 {
		return nil, bad("max attempts", fmt.Sprint(opts.MaxAttempts), errors.New("want at least 1"))
	}
	optsJSON, err := json.Marshal(opts)
	if err != nil {
		return nil, bad("insert options", fmt.Sprint(opts), err)
	}
	d := &declared{name: s.Name, spec: spec, kind: kind, args: args, opts: opts, optsJSON: optsJSON}
	switch s.CatchUp {
	case "":
		d.catchUp = CatchUpOnce
	case CatchUpSkip, CatchUpOnce, CatchUpEach:
		d.catchUp = s.CatchUp
	default:
		return nil, bad("catch-up policy", string(s.CatchUp), errors.New(`want "skip", "once" or "each"`))
	}
	switch {
	case s.CatchUpMax < 0:
		return nil, bad("catch-up bound", fmt.Sprint(s.CatchUpMax), errors.New("want at least 1"))
	case s.CatchUpMax == 0:
		d.catchUpMax = CatchUpMaxDefault
	default:
		d.catchUpMax = s.CatchUpMax
	}
	switch s.Overlap {
	case "":
		d.overlap = OverlapAllow
	case OverlapAllow, OverlapSkip:
		d.overlap = s.Overlap
	default:
		return nil, bad("overlap policy", string(s.Overlap), errors.New(`want "allow" or "skip"`))
	}
	if d.catchUp == CatchUpEach && d.overlap == OverlapSkip {
		// Each missed fire would overlap the one inserted just before it, so
		// all but one would be dropped: that is CatchUpOnce, said plainly.
		return nil, bad("catch-up policy", string(s.CatchUp), errors.New(`"each" inserts its missed fires together, which overlap skip forbids; use "once" with overlap skip`))
	}
	return d, nil
}
