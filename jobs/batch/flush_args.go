package batch

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/tributary-run/tributary/queue"
)

// FlushKind is the job kind of a flush job.
const FlushKind = "batch.flush"

// FlushMaxAttemptsDefault is a flush job's attempts. With the default
// backoff (capped at 5 minutes) that rides out a sink outage of several
// hours; after that the job is discarded, the items stay staged, and the
// age timer starts a new flush job that adopts the batch.
const FlushMaxAttemptsDefault = 100

// FlushArgs asks for a flush of one stream: the job writes every batch that
// is due (full, or with an item older than the stream's MaxAge).
type FlushArgs struct {
	Stream string `json:"stream" river:"unique"`
}

// Kind returns "batch.flush".
func (FlushArgs) Kind() string { return FlushKind }

// InsertOpts makes flush jobs unique per stream (so a burst of staging
// enqueues one job, not thousands) and gives them many attempts. Unique
// while queued, waiting for a retry or running; a completed job does not
// count, so the next threshold can enqueue again at once.
func (FlushArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{
		MaxAttempts: FlushMaxAttemptsDefault,
		UniqueOpts: river.UniqueOpts{ByArgs: true, ByState: []rivertype.JobState{
			rivertype.JobStateAvailable,
			rivertype.JobStatePending,
			rivertype.JobStateRetryable,
			rivertype.JobStateRunning,
			rivertype.JobStateScheduled,
		}},
	}
}

// enqueueFlushTx enqueues a flush job for stream in tx; a duplicate of a
// queued or running one is skipped. (River's fast batch insert uses COPY,
// which fails on a duplicate instead of skipping it, so this is a normal
// insert.) The skip locks the existing job's row until tx ends, which is why
// the stager measures a stream only now and then.
func enqueueFlushTx(ctx context.Context, client *queue.Client, tx pgx.Tx, stream string) error {
	if _, err := client.EnqueueTx(ctx, tx, FlushArgs{Stream: stream}, nil); err != nil {
		return fmt.Errorf("error enqueueing flush of stream %q: %w", stream, err)
	}
	return nil
}

// EnqueueFlush enqueues a flush job for each stream (one per stream at most
// is queued at a time). The job flushes only what is due.
func EnqueueFlush(ctx context.Context, client *queue.Client, streams ...string) error {
	params := make([]river.InsertManyParams, 0, len(streams))
	for _, s := range streams {
		if err := ValidateStream(s); err != nil {
			return err
		}
		params = append(params, river.InsertManyParams{Args: FlushArgs{Stream: s}})
	}
	if len(params) == 0 {
		return nil
	}
	if _, err := client.River().InsertMany(ctx, params); err != nil {
		return fmt.Errorf("error enqueueing %d flush jobs: %w", len(params), err)
	}
	return nil
}
