package dashboard

import (
	"context"
	"fmt"
	"github.com/tributary-run/tributary/internal/riverjob"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// ThroughputPoint is one minute of finalized jobs.
type ThroughputPoint struct {
	Minute    time.Time `json:"minute"`
	Completed int64     `json:"completed"`
	Discarded int64     `json:"discarded"`
	Cancelled int64     `json:"cancelled"`
}

// readThroughput counts the jobs finalized per minute from queriedFrom
// (or the window's first minute, whichever is later) on.
func (s *Server) readThroughput(ctx context.Context, tx pgx.Tx, minutes int, queriedFrom time.Time) (map[time.Time]*ThroughputPoint, error) {
	perMinute := map[time.Time]*ThroughputPoint{}
	rows, err := tx.Query(ctx, s.q(riverjob.ThroughputSQL), minutes-1, queriedFrom)
	if err != nil {
		return nil, fmt.Errorf("error reading throughput: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var minute time.Time
		var state string
		var n int64
		if err := rows.Scan(&minute, &state, &n); err != nil {
			return nil, fmt.Errorf("error scanning throughput: %w", err)
		}
		p := perMinute[minute.UTC()]
		if p == nil {
			p = &ThroughputPoint{Minute: minute.UTC()}
			perMinute[minute.UTC()] = p
		}
		switch state {
		case "completed":
			p.Completed = n
		case "discarded":
			p.Discarded = n
		case "cancelled":
			p.Cancelled = n
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("error reading throughput: %w", err)
	}
	return perMinute, nil
}

// throughputCache keeps the per-minute counts of minutes that are over:
// jobs finalized in them stay finalized at that time, so only the last
// minutes are read again on each overview and the query's cost follows the
// current job rate, not the rate times the window.
//
// The current minute and the one before are always read again: River's
// completer writes finalized_at a moment after the job finished, so a
// minute that just ended may still receive rows. Jobs retried or deleted
// after their minute was cached still count in it (the chart shows what
// was finalized, as it was seen).
type throughputCache struct {
	mu     sync.Mutex
	points map[time.Time]ThroughputPoint
	// to is the end (exclusive) of the cached minutes; zero when empty.
	to time.Time
}

// settleMinutes is how many of the latest minutes are never cached.
const settleMinutes = 2

// uncachedFrom is the first minute the query must read: the end of the
// cached minutes, or the beginning of time when nothing is cached (the
// query then starts at the window's beginning).
func (c *throughputCache) uncachedFrom() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.to.IsZero() {
		return time.Unix(0, 0).UTC()
	}
	return c.to
}

// merge combines the cache with fresh counts of the minutes from
// queriedFrom on, caches the minutes that are over, and returns the
// window's points, oldest first.
func (c *throughputCache) merge(now time.Time, minutes int, queriedFrom time.Time, fresh map[time.Time]*ThroughputPoint) []ThroughputPoint {
	c.mu.Lock()
	defer c.mu.Unlock()
	current := now.UTC().Truncate(time.Minute)
	start := current.Add(-time.Duration(minutes-1) * time.Minute)
	settled := current.Add(-(settleMinutes - 1) * time.Minute)
	if c.points == nil || c.to.After(settled) {
		// First use, or the database clock went back: start over.
		c.points, c.to = map[time.Time]ThroughputPoint{}, time.Time{}
	}
	out := make([]ThroughputPoint, 0, minutes)
	for i := range minutes {
		m := start.Add(time.Duration(i) * time.Minute)
		p, cached := c.points[m]
		switch {
		case cached:
		case !m.Before(queriedFrom):
			p = ThroughputPoint{Minute: m}
			if f := fresh[m]; f != nil {
				p = *f
			}
			if m.Before(settled) {
				c.points[m] = p
			}
		default:
			// Not read by this query and not cached (another request reset
			// the cache meanwhile): unknown, shown empty, read next time.
			p = ThroughputPoint{Minute: m}
		}
		out = append(out, p)
	}
	for m := range c.points {
		if m.Before(start) {
			delete(c.points, m)
		}
	}
	// The next query starts after the minutes cached without a gap.
	to := start
	for to.Before(settled) {
		if _, ok := c.points[to]; !ok {
			break
		}
		to = to.Add(time.Minute)
	}
	c.to = to
	return out
}
