package batch

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tributary-run/tributary/internal/riverjob"
	"github.com/tributary-run/tributary/queue"
)

// AgeTimerConfig configures an AgeTimer.
type AgeTimerConfig struct {
	// Streams are the stream thresholds; give the stager the same.
	Streams Config

	// Interval is how often every stream is measured.
	//
	// Defaults to 30 seconds.
	Interval time.Duration

	// Logger defaults to the client's.
	Logger *slog.Logger
}

// AgeTimer is the service that enqueues flush jobs for streams that are due
// but have no flush on the way: their oldest item is older than MaxAge (the
// reason it exists), a threshold crossing the stager did not see (it
// measures only every half threshold, and not while a flush job is
// running), or a claimed batch whose job ended without writing it. Every
// worker replica may run one; flush jobs are unique per stream.
type AgeTimer struct {
	client *queue.Client
	cfg    AgeTimerConfig
	logger *slog.Logger
	life   queue.Lifecycle
}

// NewAgeTimer returns an age timer on client.
func NewAgeTimer(client *queue.Client, cfg AgeTimerConfig) (*AgeTimer, error) {
	if client == nil {
		return nil, errors.New("batch age timer needs a client")
	}
	if err := cfg.Streams.Validate(); err != nil {
		return nil, err
	}
	cfg.Interval = cmp.Or(cfg.Interval, TimerIntervalDefault)
	if cfg.Interval < 0 {
		return nil, fmt.Errorf("invalid batch timer interval %s: want a positive duration", cfg.Interval)
	}
	return &AgeTimer{client: client, cfg: cfg, logger: cmp.Or(cfg.Logger, client.Logger())}, nil
}

// Name returns "batch age timer".
func (t *AgeTimer) Name() string { return "batch age timer" }

// Start starts the ticker; the first check runs at once.
func (t *AgeTimer) Start(ctx context.Context) error {
	return t.life.Start(ctx, t.Name(), func(run *queue.Run) error {
		run.Go(func() { t.loop(run.Stopping()) })
		t.logger.InfoContext(ctx, "batch age timer started", "interval", t.cfg.Interval)
		return nil
	})
}

// Stop stops the ticker and waits for a running check, until ctx ends.
func (t *AgeTimer) Stop(ctx context.Context) error {
	stopped, err := t.life.Stop(ctx)
	if stopped && err == nil {
		t.logger.InfoContext(ctx, "batch age timer stopped")
	}
	return err
}

func (t *AgeTimer) loop(ctx context.Context) {
	ticker := time.NewTicker(t.cfg.Interval)
	defer ticker.Stop()
	for {
		if n, err := t.Tick(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			t.logger.WarnContext(ctx, "batch age check failed", "error", err)
		} else if n > 0 {
			t.logger.DebugContext(ctx, "enqueued batch flushes", "streams", n)
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

// Tick measures every stream once and enqueues a flush job for each that is
// due. It returns how many streams were due.
func (t *AgeTimer) Tick(ctx context.Context) (int, error) {
	pool := t.client.Pool()
	schema := t.client.Schema()
	rows, err := pool.Query(ctx, queue.Qualify(schema, streamsSQL))
	if err != nil {
		return 0, fmt.Errorf("error listing batch streams: %w", err)
	}
	streams, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return 0, fmt.Errorf("error listing batch streams: %w", err)
	}
	orphaned, err := orphanedStreams(ctx, pool, schema)
	if err != nil {
		return 0, err
	}

	due := map[string]bool{}
	for _, s := range orphaned {
		due[s] = true
	}
	now := time.Now().UTC()
	for _, s := range streams {
		if due[s] {
			continue
		}
		sc := t.cfg.Streams.For(s)
		h, err := measureHead(ctx, pool, schema, s, sc.MaxEvents)
		if err != nil {
			return 0, err
		}
		if h.due(sc, now) {
			due[s] = true
		}
	}
	if len(due) == 0 {
		return 0, nil
	}
	list := slices.Sorted(maps.Keys(due))
	if err := EnqueueFlush(ctx, t.client, list...); err != nil {
		return 0, err
	}
	return len(list), nil
}

// orphanedStreams lists the streams whose claimed batch lost its job
// (discarded after its attempts, cancelled, deleted): a new flush job must
// adopt the batch.
func orphanedStreams(ctx context.Context, db queue.DBTX, schema string) ([]string, error) {
	claims, err := riverjob.KeyedJobStates(ctx, db, schema, queue.Qualify(schema, claimedSQL))
	if err != nil {
		return nil, fmt.Errorf("error listing orphaned batches: %w", err)
	}
	var out []string
	for _, c := range claims {
		if c.State == "" || riverjob.Finalized(c.State) {
			out = append(out, c.Key)
		}
	}
	return out, nil
}
