package dashboard

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tributary-run/tributary/jobs/events"
)

// pendingDispatches caches the event consumers' pending dispatch counts for
// /metrics. Counting reads every unfinished dispatch job
// (events.CountPendingDispatches: 20,000 of them scattered over a table of
// 10,000,000 jobs took 370 ms, most of /metrics), so a scrape serves the
// last count and its age and, once that is older than maxAge, starts one
// recount in the background; only the first scrape counts while it waits.
// The recount's cost is then paid once per maxAge, however many scrapers
// there are.
type pendingDispatches struct {
	s      *Server
	maxAge time.Duration

	mu         sync.Mutex
	counts     map[string]int64
	takenAt    time.Time // zero before the first count
	refreshing bool
}

// get returns the counts and when they were taken. It counts in the
// caller's stead only when there is no count yet.
func (p *pendingDispatches) get(ctx context.Context) (map[string]int64, time.Time, error) {
	p.mu.Lock()
	counts, takenAt := p.counts, p.takenAt
	stale := takenAt.IsZero() || time.Since(takenAt) >= p.maxAge
	start := stale && !p.refreshing && !takenAt.IsZero()
	if start {
		p.refreshing = true
	}
	p.mu.Unlock()
	if takenAt.IsZero() {
		return p.count(ctx)
	}
	if start {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), p.s.cfg.QueryTimeout)
			defer cancel()
			if _, _, err := p.count(ctx); err != nil {
				p.s.logger.WarnContext(ctx, "could not recount the event consumers' pending dispatches; /metrics keeps the last count", "error", err)
			}
		}()
	}
	return counts, takenAt, nil
}

// count counts now and keeps the result.
func (p *pendingDispatches) count(ctx context.Context) (map[string]int64, time.Time, error) {
	defer func() {
		p.mu.Lock()
		p.refreshing = false
		p.mu.Unlock()
	}()
	var counts map[string]int64
	err := p.s.readTx(ctx, func(tx pgx.Tx) error {
		var err error
		counts, err = events.CountPendingDispatches(ctx, tx, p.s.schema)
		return err
	})
	if err != nil {
		return nil, time.Time{}, err
	}
	now := time.Now()
	p.mu.Lock()
	p.counts, p.takenAt = counts, now
	p.mu.Unlock()
	return counts, now, nil
}
