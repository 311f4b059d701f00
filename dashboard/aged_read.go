package dashboard

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// agedRead keeps the last result of a read too costly for every scrape,
// with when it was taken. A caller gets the last result and its time and,
// once that is older than maxAge, starts one re-read in the background;
// only a caller that finds no result yet reads in its own stead. The
// read's cost is then paid once per maxAge at most, however many scrapers
// there are, and no request waits for it but the very first.
//
// The dashboard keeps two: the event consumers' pending dispatches
// (events.CountPendingDispatches reads every unfinished dispatch job:
// 20,000 of them scattered over a table of 10,000,000 jobs took 370 ms)
// and the capped job and workflow counts of /metrics (metricsCounts).
type agedRead[T any] struct {
	s      *Server
	maxAge time.Duration
	what   string // what is read, for the log
	read   func(ctx context.Context, tx pgx.Tx) (T, error)

	mu         sync.Mutex
	val        T
	takenAt    time.Time // zero before the first read
	refreshing bool
}

// get returns the last result and when it was taken.
func (a *agedRead[T]) get(ctx context.Context) (T, time.Time, error) {
	a.mu.Lock()
	val, takenAt := a.val, a.takenAt
	stale := takenAt.IsZero() || time.Since(takenAt) >= a.maxAge
	start := stale && !a.refreshing && !takenAt.IsZero()
	if start {
		a.refreshing = true
	}
	a.mu.Unlock()
	if takenAt.IsZero() {
		return a.readNow(ctx)
	}
	if start {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), a.s.cfg.QueryTimeout)
			defer cancel()
			if _, _, err := a.readNow(ctx); err != nil {
				a.s.logger.WarnContext(ctx, "could not read "+a.what+" again; the dashboard keeps the last result", "error", err)
			}
		}()
	}
	return val, takenAt, nil
}

// readNow reads now and keeps the result.
func (a *agedRead[T]) readNow(ctx context.Context) (T, time.Time, error) {
	defer func() {
		a.mu.Lock()
		a.refreshing = false
		a.mu.Unlock()
	}()
	var val T
	err := a.s.readTx(ctx, func(tx pgx.Tx) error {
		var err error
		val, err = a.read(ctx, tx)
		return err
	})
	if err != nil {
		var zero T
		return zero, time.Time{}, err
	}
	now := time.Now()
	a.mu.Lock()
	a.val, a.takenAt = val, now
	a.mu.Unlock()
	return val, now, nil
}
