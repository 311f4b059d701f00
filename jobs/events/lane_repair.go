package events

import (
	"context"
	"time"
)

// LaneRepairIntervalDefault is how often a dispatcher looks for lanes whose
// head is still pending.
const LaneRepairIntervalDefault = 30 * time.Second

// laneRepairQuietFor is how long a lane must have been untouched before the
// repair considers it stuck, so it never races a completion in flight.
const laneRepairQuietFor = 10 * time.Second

// runLaneRepair promotes, every interval, the head dispatch of any lane that
// has been quiet with its head still pending. By construction a head is
// promoted in the transaction that completes its predecessor; this is the
// safety net should that ever not happen (a job deleted or edited by hand,
// a bug), so a lane stalls for at most an interval, and says so in the log.
func (d *Dispatcher) runLaneRepair(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		d.RepairLanes(ctx)
	}
}

// RepairLanes promotes stuck lane heads once and returns how many.
func (d *Dispatcher) RepairLanes(ctx context.Context) int {
	now := time.Now().UTC()
	rows, err := d.pool.Query(ctx, d.repairSQL, customPlan, now.Add(-laneRepairQuietFor), now)
	if err != nil {
		if ctx.Err() == nil {
			d.logger.WarnContext(ctx, "error looking for stuck event lanes", "error", err)
		}
		return 0
	}
	var queues []string
	n := 0
	for rows.Next() {
		var q, consumer, agg string
		var seq int64
		if err := rows.Scan(&q, &consumer, &agg, &seq); err != nil {
			break
		}
		n++
		queues = append(queues, q)
		d.logger.WarnContext(ctx, "promoted the stuck head of an event lane", "consumer", consumer, "aggregate_id", agg, "seq", seq)
	}
	rows.Close()
	if n > 0 {
		d.wakeRiver(ctx, queues[0])
	}
	return n
}

const laneRepairSQL = `
UPDATE /*schema*/river_job j
SET state = 'available', scheduled_at = $2
FROM /*schema*/tributary_event_lane l
CROSS JOIN LATERAL (
    SELECT p.id FROM /*schema*/river_job p
    WHERE p.state = 'pending' AND p.kind = 'tributary.event.dispatch'
      AND (p.args ->> 'consumer') = l.consumer AND (p.args ->> 'aggregate_id') = l.aggregate_id
      AND ((p.args ->> 'seq')::bigint) = l.head_seq
    LIMIT 1
) head
WHERE l.head_seq <= l.last_seq AND l.updated_at < $1
  AND j.id = head.id AND j.state = 'pending'
RETURNING j.queue, l.consumer, l.aggregate_id, l.head_seq`
