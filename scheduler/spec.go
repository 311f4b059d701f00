package scheduler

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// TimezoneDefault is the timezone of a schedule that names none. UTC, not the
// server's local zone: replicas on differently configured hosts must agree
// on when a schedule fires.
const TimezoneDefault = "UTC"

// parserOptions accept 5 fields, an optional leading seconds field, and
// descriptors (@every, @daily, ...).
const parserOptions = cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor

// Spec is a parsed cron specification in its timezone.
type Spec struct {
	// Expr is the expression without a CRON_TZ= prefix.
	Expr string
	// Timezone is the IANA name the expression is evaluated in.
	Timezone string

	schedule cron.Schedule  // @every: fires by robfig's ConstantDelaySchedule
	zoned    *zonedSchedule // cron fields: fires by the wall clock, see plan_dst.go
	every    time.Duration  // > 0 for @every
}

// errSpec and errTimezone tell ParseSpec's callers which value was bad.
var (
	errSpec     = errors.New("invalid spec")
	errTimezone = errors.New("unknown timezone")
)

// specError is a spec that does not parse or never fires.
type specError struct {
	spec   string
	detail string
}

func (e *specError) Error() string { return fmt.Sprintf("%v %q: %s", errSpec, e.spec, e.detail) }

func (e *specError) Unwrap() error { return errSpec }

// timezoneError is an unknown timezone; name is the zone alone, even when it
// came from a CRON_TZ= prefix.
type timezoneError struct {
	name   string
	detail string
}

func (e *timezoneError) Error() string { return fmt.Sprintf("%v %q%s", errTimezone, e.name, e.detail) }

func (e *timezoneError) Unwrap() error { return errTimezone }

// ParseSpec parses a cron expression: 5 fields (minute hour dom month dow),
// or 6 with a leading seconds field, or a descriptor (@yearly, @monthly,
// @weekly, @daily, @hourly, @every DURATION). A "CRON_TZ=Area/City " (or
// "TZ=") prefix sets the timezone; timezone, when not empty, must agree with
// it. Without either the spec runs in UTC.
func ParseSpec(spec, timezone string) (*Spec, error) {
	expr := strings.TrimSpace(spec)
	tz := strings.TrimSpace(timezone)
	for _, prefix := range []string{"CRON_TZ=", "TZ="} {
		if !strings.HasPrefix(expr, prefix) {
			continue
		}
		rest := expr[len(prefix):]
		name, after, ok := strings.Cut(rest, " ")
		if !ok || strings.TrimSpace(after) == "" {
			return nil, &specError{spec: spec, detail: fmt.Sprintf("%s needs a timezone followed by an expression", prefix)}
		}
		if tz != "" && tz != name {
			return nil, &specError{spec: spec, detail: fmt.Sprintf("its %s%s disagrees with timezone %q", prefix, name, tz)}
		}
		tz = name
		expr = strings.TrimSpace(after)
		break
	}
	if tz == "" {
		tz = TimezoneDefault
	}
	// time.LoadLocation accepts "" and "Local" as the host's zone; neither
	// means the same thing on every replica.
	if tz == "Local" {
		return nil, &timezoneError{name: tz, detail: ": name an IANA zone such as Europe/Berlin, not the host's local zone"}
	}
	loc, err := time.LoadLocation(tz)
	if err != nil {
		return nil, &timezoneError{name: tz}
	}
	if expr == "" {
		return nil, &specError{spec: spec, detail: "empty expression"}
	}
	sched, err := cron.NewParser(parserOptions).Parse(expr)
	if err != nil {
		return nil, &specError{spec: spec, detail: err.Error()}
	}
	out := &Spec{Expr: expr, Timezone: tz, schedule: sched}
	switch s := sched.(type) {
	case *cron.SpecSchedule:
		s.Location = loc
		out.zoned = newZonedSchedule(s, loc)
	case cron.ConstantDelaySchedule:
		// robfig rounds sub-second and fractional delays silently; refuse
		// them so the stored schedule means what the code says.
		raw := strings.TrimSpace(strings.TrimPrefix(expr, "@every"))
		d, perr := time.ParseDuration(raw)
		if perr != nil || d < time.Second || d%time.Second != 0 {
			return nil, &specError{spec: spec, detail: "@every needs a whole number of seconds, at least 1s"}
		}
		out.every = s.Delay
	}
	// A spec such as "0 0 30 2 *" (30 February) parses but never fires.
	if out.Next(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)).IsZero() {
		return nil, &specError{spec: spec, detail: "it never fires"}
	}
	return out, nil
}

// String returns the expression with its timezone prefix, in a form
// ParseSpec accepts.
func (s *Spec) String() string {
	if s.every > 0 || s.Timezone == TimezoneDefault {
		return s.Expr
	}
	return "CRON_TZ=" + s.Timezone + " " + s.Expr
}

// Next returns the first fire time strictly after t, in UTC. It is the zero
// time if the spec never fires again.
//
// Cron fields are read on the timezone's wall clock: a time skipped by a
// daylight-saving change fires once at the first instant after the gap, a
// time that occurs twice fires once, at its first occurrence, and a spec
// whose hour field is every hour fires in real hours (both passes of a
// repeated hour, none in a skipped one). @every is a fixed interval of real
// time: its timezone does not matter.
func (s *Spec) Next(t time.Time) time.Time {
	if s.zoned != nil {
		return s.zoned.next(t)
	}
	n := s.schedule.Next(t)
	if n.IsZero() {
		return n
	}
	return n.UTC()
}

// scanLimit bounds how many fire times dueFires walks one by one before it
// switches to a cheaper search; a per-second schedule after a week of
// downtime would otherwise walk 600,000 of them.
const scanLimit = 10_000

// dueFires looks at the fire times from `from` (itself a fire time) up to
// now. It returns how many there are (count; exact is false when there were
// more than scanLimit and count is then a lower bound), the last `keep` of
// them in ascending order, and the first fire time after now.
func (s *Spec) dueFires(from, now time.Time, keep int) (count int64, exact bool, last []time.Time, next time.Time) {
	if keep < 1 {
		keep = 1
	}
	if from.After(now) {
		return 0, true, nil, from
	}
	if s.every > 0 {
		// Constant delay: the fire times are from + k*every.
		k := int64(now.Sub(from) / s.every)
		count = k + 1
		first := max(int64(0), k-int64(keep)+1)
		for i := first; i <= k; i++ {
			last = append(last, from.Add(time.Duration(i)*s.every))
		}
		return count, true, last, from.Add(time.Duration(k+1) * s.every)
	}
	ring := make([]time.Time, 0, keep)
	push := func(t time.Time) {
		if len(ring) == keep {
			copy(ring, ring[1:])
			ring = ring[:keep-1]
		}
		ring = append(ring, t)
	}
	t := from
	for !t.IsZero() && !t.After(now) {
		count++
		push(t)
		if count >= scanLimit {
			break
		}
		t = s.Next(t)
	}
	if t.IsZero() || t.After(now) {
		return count, true, ring, t
	}
	// Too many to walk: find the last `keep` fire times by looking back from
	// now over a window that grows until it holds enough of them.
	for window := time.Minute; ; window *= 4 {
		start := now.Add(-window)
		if !start.After(t) {
			start = t
		}
		ring = ring[:0]
		n := 0
		for u := s.Next(start.Add(-time.Nanosecond)); !u.IsZero() && !u.After(now); u = s.Next(u) {
			push(u)
			n++
		}
		if n >= keep || start.Equal(t) {
			return count, false, ring, s.Next(now)
		}
	}
}
