package scheduler

import (
	"time"

	"github.com/robfig/cron/v3"
)

// zonedSchedule is a cron spec (not @every) evaluated on the wall clock of a
// timezone, with tributary's daylight-saving policy:
//
//   - A wall-clock time the clocks skip (spring forward) fires once, at the
//     first instant after the gap (02:30 in Europe/Berlin on the last Sunday
//     of March fires at 03:00 CEST). Several skipped times fold into that
//     one fire, and so does a listed time equal to it (03:00 itself).
//   - A wall-clock time that occurs twice (fall back) fires once, at its
//     first occurrence (02:30 CEST, not 02:30 CET).
//   - Except when the hour field matches every hour (@hourly, `0 * * * *`,
//     `*/15 * * * *`): such a spec names minutes of every hour, not a time
//     of day, so it follows real hours. Its times fire in both passes of a
//     repeated hour and not at all in a skipped hour, so an hourly job runs
//     25 times on the 25-hour day and 23 times on the 23-hour day, always
//     an hour apart.
//
// robfig/cron's own Next moves in absolute time inside the zone: it loses
// the skipped times and fires the repeated ones twice. Here robfig only
// matches fields, on wall-clock readings held as UTC times (a calendar
// without transitions); resolving a reading to instants is done below.
type zonedSchedule struct {
	fields    cron.SpecSchedule // Location UTC: matches wall-clock readings
	loc       *time.Location
	everyHour bool
}

// allHours is the SpecSchedule.Hour bits of hours 0 to 23.
const allHours = 1<<24 - 1

// UTC offsets run from -12 h to +14 h, so the instants whose wall-clock
// reading is u lie in [u-offsetMax, u-offsetMin].
const (
	offsetMin = -12 * 60 * 60
	offsetMax = 14 * 60 * 60
	zoneReach = offsetMax - offsetMin
)

func newZonedSchedule(s *cron.SpecSchedule, loc *time.Location) *zonedSchedule {
	fields := *s
	fields.Location = time.UTC
	return &zonedSchedule{fields: fields, loc: loc, everyHour: s.Hour&allHours == allHours}
}

// The helpers below assume a zone changes its offset at most once within
// zoneReach (26 h): true of every zone in the system's zone data from 1970
// to 2100, checked when this was written. They do not use
// time.Time.ZoneBounds: past the zone data's last transition it puts a
// period's end a day early on the last day of a leap year (all of the
// last day of 2040 in Europe/Berlin with Go 1.26), no later than the time
// asked about, and walking periods by it never ends.

// offset returns the zone's UTC offset in seconds at Unix time u.
func (z *zonedSchedule) offset(u int64) int64 {
	_, off := time.Unix(u, 0).In(z.loc).Zone()
	return int64(off)
}

// change returns the first second in (a, b] whose offset differs from a's,
// where the offsets at a and b differ.
func (z *zonedSchedule) change(a, b int64) int64 {
	before := z.offset(a)
	for b-a > 1 {
		mid := a + (b-a)/2
		if z.offset(mid) == before {
			a = mid
		} else {
			b = mid
		}
	}
	return b
}

// wall returns t's wall-clock reading in the zone, as a UTC time.
func (z *zonedSchedule) wall(t time.Time) time.Time {
	_, offset := t.In(z.loc).Zone()
	return t.Add(time.Duration(offset) * time.Second).UTC()
}

// fires returns the instants, ascending, at which the wall-clock reading
// wall fires under the policy above (none, one or two).
func (z *zonedSchedule) fires(wall time.Time) []time.Time {
	u := wall.Unix()
	early, late := u-offsetMax, u-offsetMin
	offEarly, offLate := z.offset(early), z.offset(late)
	var occurrences []time.Time
	for i, off := range []int64{offEarly, offLate} {
		if i == 1 && off == offEarly {
			break
		}
		if at := u - off; z.offset(at) == off {
			occurrences = append(occurrences, time.Unix(at, 0).UTC())
		}
	}
	if len(occurrences) == 2 && occurrences[1].Before(occurrences[0]) {
		occurrences[0], occurrences[1] = occurrences[1], occurrences[0]
	}
	switch {
	case len(occurrences) == 0 && (z.everyHour || offEarly == offLate):
		return nil
	case len(occurrences) == 0:
		// The clocks jumped over wall: the first instant after the gap is
		// the change itself.
		return []time.Time{time.Unix(z.change(early, late), 0).UTC()}
	case len(occurrences) > 1 && !z.everyHour:
		return occurrences[:1]
	}
	return occurrences
}

// next returns the first fire time strictly after t, or the zero time when
// robfig finds no matching reading within its five-year horizon.
func (z *zonedSchedule) next(t time.Time) time.Time {
	// A fire time after t reads earlier than t on the wall clock when the
	// clocks go back in between: start from the lowest reading still ahead.
	from := z.wall(t)
	if offNow, offLater := z.offset(t.Unix()), z.offset(t.Unix()+zoneReach); offLater < offNow {
		if w := time.Unix(z.change(t.Unix(), t.Unix()+zoneReach)+offLater, 0).UTC(); w.Before(from) {
			from = w
		}
	}
	var best, bound time.Time
	for w := z.fields.Next(from.Add(-time.Second)); !w.IsZero(); w = z.fields.Next(w) {
		if !best.IsZero() && w.After(bound) {
			// Every instant that reads w or later reads later than anything
			// in (t, best], so it comes after best.
			return best
		}
		for _, at := range z.fires(w) {
			if at.After(t) && (best.IsZero() || at.Before(best)) {
				best, bound = at, z.highestWall(t, at)
			}
		}
	}
	return best
}

// highestWall returns a wall-clock reading that no instant in (t, until]
// exceeds: until's own, or, when the clocks went back less than a zone's
// reach before until, the reading just before they did.
func (z *zonedSchedule) highestWall(t, until time.Time) time.Time {
	high := z.wall(until)
	a, b := max(t.Unix(), until.Unix()-zoneReach), until.Unix()
	if offBefore, offUntil := z.offset(a), z.offset(b); offBefore > offUntil {
		if w := time.Unix(z.change(a, b)+offBefore, 0).UTC(); w.After(high) {
			high = w
		}
	}
	return high
}
