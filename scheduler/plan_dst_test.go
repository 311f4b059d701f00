package scheduler

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The 2026 transitions the tests below cross:
//
//	Europe/Berlin     spring 29 Mar 01:00 UTC: 02:00 CET  -> 03:00 CEST (02:00-02:59 skipped)
//	                  fall   25 Oct 01:00 UTC: 03:00 CEST -> 02:00 CET  (02:00-02:59 twice)
//	America/New_York  spring  8 Mar 07:00 UTC: 02:00 EST  -> 03:00 EDT  (02:00-02:59 skipped)
//	                  fall    1 Nov 06:00 UTC: 02:00 EDT  -> 01:00 EST  (01:00-01:59 twice)

func utc(month time.Month, day, hour, minute, sec int) time.Time {
	return time.Date(2026, month, day, hour, minute, sec, 0, time.UTC)
}

// walk returns every fire time of spec in (from, until], by repeated Next.
func walk(t *testing.T, spec *Spec, from, until time.Time) []time.Time {
	t.Helper()
	var out []time.Time
	for at := spec.Next(from); !at.IsZero() && !at.After(until); at = spec.Next(at) {
		require.True(t, at.After(from), "Next(%s) = %s went backwards", from, at)
		out = append(out, at)
		from = at
		require.Less(t, len(out), 10_000, "runaway walk")
	}
	return out
}

func mustSpec(t *testing.T, expr, tz string) *Spec {
	t.Helper()
	spec, err := ParseSpec(expr, tz)
	require.NoError(t, err)
	return spec
}

func TestSpecNextDaylightSaving(t *testing.T) {
	t.Parallel()

	cases := []struct {
		name        string
		expr, tz    string
		from, until time.Time
		want        []time.Time
	}{
		{
			name: "Berlin spring: a skipped 02:30 runs once at 03:00 CEST",
			expr: "30 2 * * *", tz: "Europe/Berlin",
			from: utc(time.March, 28, 0, 0, 0), until: utc(time.March, 30, 12, 0, 0),
			want: []time.Time{
				utc(time.March, 28, 1, 30, 0), // 02:30 CET
				utc(time.March, 29, 1, 0, 0),  // 03:00 CEST, the first instant after the gap
				utc(time.March, 30, 0, 30, 0), // 02:30 CEST
			},
		},
		{
			name: "Berlin fall: a twice-occurring 02:30 runs once, at its first occurrence",
			expr: "30 2 * * *", tz: "Europe/Berlin",
			from: utc(time.October, 24, 0, 0, 0), until: utc(time.October, 26, 12, 0, 0),
			want: []time.Time{
				utc(time.October, 24, 0, 30, 0), // 02:30 CEST
				utc(time.October, 25, 0, 30, 0), // 02:30 CEST; 02:30 CET (01:30 UTC) does not run
				utc(time.October, 26, 1, 30, 0), // 02:30 CET
			},
		},
		{
			name: "New York spring: a skipped 02:30 runs once at 03:00 EDT",
			expr: "30 2 * * *", tz: "America/New_York",
			from: utc(time.March, 7, 0, 0, 0), until: utc(time.March, 9, 12, 0, 0),
			want: []time.Time{
				utc(time.March, 7, 7, 30, 0), // 02:30 EST
				utc(time.March, 8, 7, 0, 0),  // 03:00 EDT
				utc(time.March, 9, 6, 30, 0), // 02:30 EDT
			},
		},
		{
			name: "New York fall: a twice-occurring 01:30 runs once, at its first occurrence",
			expr: "30 1 * * *", tz: "America/New_York",
			from: utc(time.October, 31, 0, 0, 0), until: utc(time.November, 2, 12, 0, 0),
			want: []time.Time{
				utc(time.October, 31, 5, 30, 0), // 01:30 EDT
				utc(time.November, 1, 5, 30, 0), // 01:30 EDT; 01:30 EST (06:30 UTC) does not run
				utc(time.November, 2, 6, 30, 0), // 01:30 EST
			},
		},
		{
			name: "New York fall: 02:30 is not ambiguous there and runs once a day",
			expr: "30 2 * * *", tz: "America/New_York",
			from: utc(time.October, 31, 12, 0, 0), until: utc(time.November, 1, 12, 0, 0),
			want: []time.Time{utc(time.November, 1, 7, 30, 0)}, // 02:30 EST
		},
		{
			name: "Berlin spring: several skipped times inside the gap collapse into one run",
			expr: "*/15 2 * * *", tz: "Europe/Berlin",
			from: utc(time.March, 28, 12, 0, 0), until: utc(time.March, 29, 12, 0, 0),
			want: []time.Time{utc(time.March, 29, 1, 0, 0)},
		},
		{
			name: "Berlin fall: several repeated times each run once, in the first pass",
			expr: "*/15 2 * * *", tz: "Europe/Berlin",
			from: utc(time.October, 24, 12, 0, 0), until: utc(time.October, 25, 12, 0, 0),
			want: []time.Time{
				utc(time.October, 25, 0, 0, 0), utc(time.October, 25, 0, 15, 0),
				utc(time.October, 25, 0, 30, 0), utc(time.October, 25, 0, 45, 0),
			},
		},
		{
			name: "Berlin spring: a gap time that coincides with a listed time runs once",
			expr: "0 2,3 * * *", tz: "Europe/Berlin",
			from: utc(time.March, 28, 12, 0, 0), until: utc(time.March, 29, 12, 0, 0),
			want: []time.Time{utc(time.March, 29, 1, 0, 0)}, // 02:00 (skipped) and 03:00 are the same instant
		},
		{
			name: "Berlin spring: hourly keeps real hours, 23 runs on a 23-hour day",
			expr: "0 * * * *", tz: "Europe/Berlin",
			from: utc(time.March, 28, 22, 59, 0), until: utc(time.March, 29, 2, 0, 0),
			want: []time.Time{
				utc(time.March, 28, 23, 0, 0), // 00:00 CET
				utc(time.March, 29, 0, 0, 0),  // 01:00 CET
				utc(time.March, 29, 1, 0, 0),  // 03:00 CEST
				utc(time.March, 29, 2, 0, 0),  // 04:00 CEST
			},
		},
		{
			name: "Berlin fall: hourly runs in both real 02:00 hours",
			expr: "0 * * * *", tz: "Europe/Berlin",
			from: utc(time.October, 24, 22, 59, 0), until: utc(time.October, 25, 2, 0, 0),
			want: []time.Time{
				utc(time.October, 24, 23, 0, 0), // 01:00 CEST
				utc(time.October, 25, 0, 0, 0),  // 02:00 CEST
				utc(time.October, 25, 1, 0, 0),  // 02:00 CET
				utc(time.October, 25, 2, 0, 0),  // 03:00 CET
			},
		},
		{
			name: "Berlin spring: half past every hour does not invent a run in the missing hour",
			expr: "30 * * * *", tz: "Europe/Berlin",
			from: utc(time.March, 29, 0, 0, 0), until: utc(time.March, 29, 2, 0, 0),
			want: []time.Time{
				utc(time.March, 29, 0, 30, 0), // 01:30 CET
				utc(time.March, 29, 1, 30, 0), // 03:30 CEST
			},
		},
		{
			name: "New York fall: hourly runs in both real 01:00 hours",
			expr: "0 * * * *", tz: "America/New_York",
			from: utc(time.November, 1, 4, 30, 0), until: utc(time.November, 1, 7, 0, 0),
			want: []time.Time{
				utc(time.November, 1, 5, 0, 0), // 01:00 EDT
				utc(time.November, 1, 6, 0, 0), // 01:00 EST
				utc(time.November, 1, 7, 0, 0), // 02:00 EST
			},
		},
		{
			name: "New York spring: hourly keeps real hours",
			expr: "@hourly", tz: "America/New_York",
			from: utc(time.March, 8, 5, 30, 0), until: utc(time.March, 8, 8, 0, 0),
			want: []time.Time{
				utc(time.March, 8, 6, 0, 0), // 01:00 EST
				utc(time.March, 8, 7, 0, 0), // 03:00 EDT
				utc(time.March, 8, 8, 0, 0), // 04:00 EDT
			},
		},
		{
			name: "Berlin fall: every 20 minutes keeps going through both passes",
			expr: "*/20 * * * *", tz: "Europe/Berlin",
			from: utc(time.October, 24, 23, 50, 0), until: utc(time.October, 25, 1, 50, 0),
			want: []time.Time{
				utc(time.October, 25, 0, 0, 0), utc(time.October, 25, 0, 20, 0), utc(time.October, 25, 0, 40, 0),
				utc(time.October, 25, 1, 0, 0), utc(time.October, 25, 1, 20, 0), utc(time.October, 25, 1, 40, 0),
			},
		},
		{
			name: "Berlin spring with seconds: 02:30:15 runs once at 03:00:00 CEST",
			expr: "15 30 2 * * *", tz: "Europe/Berlin",
			from: utc(time.March, 28, 12, 0, 0), until: utc(time.March, 29, 12, 0, 0),
			want: []time.Time{utc(time.March, 29, 1, 0, 0)},
		},
		{
			name: "Berlin fall with seconds: 02:30:15 runs once, in the first pass",
			expr: "15 30 2 * * *", tz: "Europe/Berlin",
			from: utc(time.October, 24, 12, 0, 0), until: utc(time.October, 25, 12, 0, 0),
			want: []time.Time{utc(time.October, 25, 0, 30, 15)},
		},
		{
			name: "Berlin fall with seconds: every 30 s of every hour runs in both passes",
			expr: "*/30 59 * * * *", tz: "Europe/Berlin",
			from: utc(time.October, 24, 23, 30, 0), until: utc(time.October, 25, 2, 0, 0),
			want: []time.Time{
				utc(time.October, 24, 23, 59, 0), utc(time.October, 24, 23, 59, 30), // 01:59 CEST
				utc(time.October, 25, 0, 59, 0), utc(time.October, 25, 0, 59, 30), // 02:59 CEST
				utc(time.October, 25, 1, 59, 0), utc(time.October, 25, 1, 59, 30), // 02:59 CET
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			spec := mustSpec(t, tc.expr, tc.tz)
			require.Equal(t, tc.want, walk(t, spec, tc.from, tc.until))
		})
	}
}

// TestSpecNextFromAnyInstant asks Next from instants all over each
// transition day, inside the skipped and the repeated hour too: the answer
// must be the first fire time of the day's timetable after that instant, so
// a replica that declares, resumes or restarts mid-transition neither skips
// nor repeats a run.
func TestSpecNextFromAnyInstant(t *testing.T) {
	t.Parallel()

	// Every 4m07s over three days lands inside the skipped and the repeated
	// hour about fifteen times each, at ever different seconds.
	exprs := []string{"30 2 * * *", "30 1 * * *", "*/15 2 * * *", "0 1-3 * * *", "0 * * * *", "30 * * * *", "*/20 * * * *", "15 30 2 * * *", "@daily"}
	days := []struct {
		tz  string
		day time.Time
	}{
		{"Europe/Berlin", utc(time.March, 29, 0, 0, 0)},
		{"Europe/Berlin", utc(time.October, 25, 0, 0, 0)},
		{"America/New_York", utc(time.March, 8, 0, 0, 0)},
		{"America/New_York", utc(time.November, 1, 0, 0, 0)},
	}
	for _, d := range days {
		for _, expr := range exprs {
			t.Run(d.tz+" "+d.day.Format(time.DateOnly)+" "+expr, func(t *testing.T) {
				t.Parallel()
				spec := mustSpec(t, expr, d.tz)
				from, until := d.day.Add(-24*time.Hour), d.day.Add(48*time.Hour)
				timetable := walk(t, spec, from, until)
				require.NotEmpty(t, timetable)
				for at := from; at.Before(timetable[len(timetable)-1]); at = at.Add(4*time.Minute + 7*time.Second) {
					want := time.Time{}
					for _, f := range timetable {
						if f.After(at) {
							want = f
							break
						}
					}
					require.Equal(t, want, spec.Next(at), "Next(%s)", at)
				}
			})
		}
	}
}

// TestEveryIsAbsoluteAcrossDaylightSaving: @every is a fixed interval of
// real time, so the timezone does not matter and the local clock time of its
// runs moves by an hour across a transition.
func TestEveryIsAbsoluteAcrossDaylightSaving(t *testing.T) {
	t.Parallel()

	berlin, err := time.LoadLocation("Europe/Berlin")
	require.NoError(t, err)
	local := func(ts []time.Time) []string {
		out := make([]string, len(ts))
		for i, at := range ts {
			out[i] = at.In(berlin).Format("01-02 15:04 MST")
		}
		return out
	}

	hourly := mustSpec(t, "@every 1h", "Europe/Berlin")
	fall := walk(t, hourly, utc(time.October, 24, 23, 0, 0), utc(time.October, 25, 2, 0, 0))
	require.Equal(t, []time.Time{utc(time.October, 25, 0, 0, 0), utc(time.October, 25, 1, 0, 0), utc(time.October, 25, 2, 0, 0)}, fall)
	require.Equal(t, []string{"10-25 02:00 CEST", "10-25 02:00 CET", "10-25 03:00 CET"}, local(fall))

	spring := walk(t, hourly, utc(time.March, 28, 23, 0, 0), utc(time.March, 29, 1, 0, 0))
	require.Equal(t, []string{"03-29 01:00 CET", "03-29 03:00 CEST"}, local(spring))

	daily := mustSpec(t, "@every 24h", "Europe/Berlin")
	days := walk(t, daily, utc(time.October, 23, 0, 30, 0), utc(time.October, 26, 0, 30, 0))
	require.Equal(t, []string{"10-24 02:30 CEST", "10-25 02:30 CEST", "10-26 01:30 CET"}, local(days))
}

// TestPlanFiresAcrossFallBack: catch-up after downtime spanning the repeated
// hour sees the same timetable as a scheduler that ran throughout.
func TestPlanFiresAcrossFallBack(t *testing.T) {
	t.Parallel()

	row := func(expr string, next time.Time) (*Spec, dueRow) {
		spec := mustSpec(t, expr, "Europe/Berlin")
		return spec, dueRow{name: "s", spec: expr, timezone: "Europe/Berlin", catchUp: CatchUpEach, catchUpMax: 10, nextRunAt: next}
	}
	now := utc(time.October, 25, 2, 30, 0) // 03:30 CET

	spec, r := row("0 * * * *", utc(time.October, 24, 23, 0, 0))
	p := planFires(spec, r, now, time.Minute)
	require.Equal(t, []time.Time{utc(time.October, 24, 23, 0, 0), utc(time.October, 25, 0, 0, 0), utc(time.October, 25, 1, 0, 0), utc(time.October, 25, 2, 0, 0)}, p.fire)
	require.Equal(t, utc(time.October, 25, 3, 0, 0), p.next)

	spec, r = row("30 2 * * *", utc(time.October, 25, 0, 30, 0))
	p = planFires(spec, r, now, time.Minute)
	require.Equal(t, []time.Time{utc(time.October, 25, 0, 30, 0)}, p.fire, "02:30 CET is the same wall time: no second run")
	require.Equal(t, utc(time.October, 26, 1, 30, 0), p.next)
}

// TestSpecNextMatchesReference compares Next with a brute-force reading of
// the policy around every 2026 transition of zones with unusual ones: a
// 30-minute shift (Lord Howe), a 45-minute offset (Chatham), transitions at
// midnight (Santiago, whose fall back repeats 23:00 of the day before). The
// reference reads the wall clock of every minute of the window and never
// looks at zone bounds.
func TestSpecNextMatchesReference(t *testing.T) {
	t.Parallel()

	zones := []string{"Europe/Berlin", "America/New_York", "Australia/Lord_Howe", "Pacific/Chatham", "America/Santiago"}
	exprs := []string{"30 2 * * *", "0 0 * * *", "30 23 * * *", "*/15 2 * * *", "0 * * * *", "45 * * * *", "*/20 1-3 * * *", "0 1 * * 0", "15 2,3 * * *"}
	for _, zone := range zones {
		loc, err := time.LoadLocation(zone)
		require.NoError(t, err)
		var transitions []time.Time
		for at := utc(time.January, 1, 0, 0, 0); at.Year() == 2026; at = at.Add(time.Hour) {
			_, before := at.In(loc).Zone()
			_, after := at.Add(time.Hour).In(loc).Zone()
			if before != after {
				transitions = append(transitions, at)
			}
		}
		require.Len(t, transitions, 2, zone)
		for _, tr := range transitions {
			for _, expr := range exprs {
				t.Run(zone+" "+tr.Format(time.DateOnly)+" "+expr, func(t *testing.T) {
					t.Parallel()
					spec := mustSpec(t, expr, zone)
					from, until := tr.Add(-36*time.Hour), tr.Add(36*time.Hour)
					want := referenceFires(spec, loc, from, until)
					require.NotEmpty(t, want)
					require.Equal(t, want, walk(t, spec, from, until))
				})
			}
		}
	}
}

// referenceFires applies the daylight-saving policy by brute force to a
// minute-granular spec: it groups the minutes of [from-1d, until+1d] by their
// wall-clock reading, then decides each matching reading in [wall(from),
// wall(until)] on its own, and returns the fire times in (from, until].
func referenceFires(spec *Spec, loc *time.Location, from, until time.Time) []time.Time {
	wallOf := func(at time.Time) time.Time {
		l := at.In(loc)
		return time.Date(l.Year(), l.Month(), l.Day(), l.Hour(), l.Minute(), 0, 0, time.UTC)
	}
	matches := func(w time.Time) bool { return spec.zoned.fields.Next(w.Add(-time.Second)).Equal(w) }
	var instants []time.Time
	byWall := map[time.Time][]time.Time{}
	for at := from.Add(-24 * time.Hour); !at.After(until.Add(24 * time.Hour)); at = at.Add(time.Minute) {
		instants = append(instants, at)
		byWall[wallOf(at)] = append(byWall[wallOf(at)], at)
	}
	seen := map[time.Time]bool{}
	var out []time.Time
	add := func(at time.Time) {
		if at.After(from) && !at.After(until) && !seen[at] {
			seen[at] = true
			out = append(out, at)
		}
	}
	everyHour := spec.zoned.everyHour
	for w := wallOf(from).Add(-3 * time.Hour); !w.After(wallOf(until).Add(3 * time.Hour)); w = w.Add(time.Minute) {
		if !matches(w) {
			continue
		}
		occ := byWall[w]
		switch {
		case len(occ) == 0 && !everyHour:
			for _, at := range instants { // the first instant after the gap
				if wallOf(at).After(w) {
					add(at)
					break
				}
			}
		case len(occ) > 0 && everyHour:
			for _, at := range occ {
				add(at)
			}
		case len(occ) > 0:
			add(occ[0])
		}
	}
	slices.SortFunc(out, func(a, b time.Time) int { return a.Compare(b) })
	return out
}

func BenchmarkSpecNext(b *testing.B) {
	for _, tc := range []struct{ expr, tz string }{{"* * * * * *", "UTC"}, {"* * * * * *", "Europe/Berlin"}, {"30 2 * * *", "Europe/Berlin"}, {"@every 1s", "UTC"}} {
		b.Run(tc.expr+" "+tc.tz, func(b *testing.B) {
			spec, err := ParseSpec(tc.expr, tc.tz)
			require.NoError(b, err)
			at := utc(time.October, 20, 0, 0, 0)
			for b.Loop() {
				at = spec.Next(at)
			}
		})
	}
}

// TestSpecNextFarFuture walks a daily Berlin schedule to 2060, past the zone
// data's explicit transitions (Go derives later ones from the zone's rule),
// through leap years whose turn confuses time.Time.ZoneBounds: every run is
// at 02:30, or 03:00 on the day 02:30 is skipped, once a day.
func TestSpecNextFarFuture(t *testing.T) {
	t.Parallel()

	berlin, err := time.LoadLocation("Europe/Berlin")
	require.NoError(t, err)
	spec := mustSpec(t, "30 2 * * *", "Europe/Berlin")
	prev := spec.Next(utc(time.January, 1, 0, 0, 0))
	var gapDays int
	for prev.Year() < 2060 {
		at := spec.Next(prev)
		l, p := at.In(berlin), prev.In(berlin)
		require.Equal(t, p.AddDate(0, 0, 1).Format(time.DateOnly), l.Format(time.DateOnly), "one run a day, after %s", p)
		switch clock := l.Format("15:04"); clock {
		case "02:30":
		case "03:00":
			gapDays++
		default:
			t.Fatalf("run at %s", l)
		}
		prev = at
	}
	require.Equal(t, 2060-2026, gapDays, "one spring-forward day a year")
}
