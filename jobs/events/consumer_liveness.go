package events

import (
	"context"
	"fmt"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/tributary-run/tributary/internal/riverjob"
)

// ConsumerHeartbeatInterval is how often a running Dispatcher records, in
// its consumers' rows (seen_at), that a live worker runs them. A consumer no
// worker has recorded for its InactiveAfter stops receiving new events.
const ConsumerHeartbeatInterval = time.Minute

// runBackground records the consumers' liveness every
// ConsumerHeartbeatInterval and sweeps the lanes every LaneRepairInterval,
// until ctx ends.
func (d *Dispatcher) runBackground(ctx context.Context) {
	heartbeat := time.NewTicker(ConsumerHeartbeatInterval)
	defer heartbeat.Stop()
	var repair <-chan time.Time
	if d.cfg.LaneRepairInterval > 0 {
		t := time.NewTicker(d.cfg.LaneRepairInterval)
		defer t.Stop()
		repair = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-heartbeat.C:
			d.heartbeat(ctx)
		case <-repair:
			d.repairLanes(ctx)
		}
	}
}

// heartbeat records that this worker runs its consumers. A consumer whose
// row is gone was removed (`tributary consumers remove`) while this worker
// runs it; it is not brought back behind the operator's back, only by the
// next start.
func (d *Dispatcher) heartbeat(ctx context.Context) {
	names := d.consumerNames()
	tag, err := d.pool.Exec(ctx, d.q(consumerHeartbeatSQL), names, time.Now().UTC())
	switch {
	case err != nil:
		if ctx.Err() == nil {
			d.logger.WarnContext(ctx, "error recording that this worker runs its consumers", "error", err)
		}
	case int(tag.RowsAffected()) < len(names):
		d.logger.WarnContext(ctx, "a consumer this worker runs was removed from the database; it receives no new events until the worker restarts",
			"consumers", names, "recorded", tag.RowsAffected())
	}
}

// notRunHere is the outcome of a dispatch for a consumer this worker does
// not run: a consumer renamed or removed from the code, or one another
// worker of the same queue runs. The job waits (River's snooze: no attempt
// spent, nothing recorded as a failure), still at its lane's head, for a
// worker that runs the consumer, or for `tributary consumers remove`. Only
// the first wait is logged as a warning. A dispatch for a consumer that was
// removed from the database (one that was running while it was removed) is
// cancelled, with the reason.
func (d *Dispatcher) notRunHere(ctx context.Context, consumer string, job *rivertype.JobRow) error {
	var exists bool
	if err := d.pool.QueryRow(ctx, d.q(consumerExistsSQL), consumer).Scan(&exists); err == nil && !exists {
		d.logger.InfoContext(ctx, "dispatch for a removed consumer cancelled", "consumer", consumer, "job_id", job.ID)
		return river.JobCancel(fmt.Errorf("consumer %q was removed (tributary consumers remove)", consumer))
	}
	wait, first := riverjob.NotRunHereWait(job.Metadata)
	attrs := []any{"consumer", consumer, "job_id", job.ID, "registered_here", d.consumerNames(), "retry_in", wait}
	if first {
		d.logger.WarnContext(ctx, "dispatch for a consumer this worker does not run: waiting for a worker that does (see tributary consumers list)", attrs...)
	} else {
		d.logger.DebugContext(ctx, "dispatch for a consumer this worker does not run: waiting", attrs...)
	}
	return river.JobSnooze(wait)
}

const consumerExistsSQL = `
SELECT EXISTS (SELECT 1 FROM /*schema*/tributary_event_consumer WHERE name = $1)`

const consumerHeartbeatSQL = `
UPDATE /*schema*/tributary_event_consumer SET seen_at = $2 WHERE name = ANY($1)`
