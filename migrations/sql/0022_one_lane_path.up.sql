-- One ordered path: every consumer's lanes keep the events behind their
-- head as lane events (0016), run in place by lane chains. Before, a
-- consumer without ConsumerConfig.LaneChain had each of them wait as a
-- pending River dispatch job (docs/decisions/0010-one-lane-path.md).
--
-- The pending lane dispatch jobs an older version wrote become lane events
-- at the same places, so what was in flight is delivered by the one path,
-- in order. The events package still promotes and claims a pending lane
-- job (an early one it put back, an older worker's), so a worker of an
-- older version that writes one during a rolling deploy loses nothing;
-- lane_events stays, true for every consumer, for those workers to read.
WITH moved AS (
    DELETE FROM river_job j
    WHERE j.kind = 'tributary.event.dispatch' AND j.state = 'pending'
      AND coalesce(j.args ->> 'aggregate_id', '') <> '' AND (j.args ->> 'seq')::bigint > 0
      AND NOT EXISTS (
          SELECT 1 FROM tributary_event_lane_event e
          WHERE e.consumer = j.args ->> 'consumer' AND e.aggregate_id = j.args ->> 'aggregate_id'
            AND e.seq = (j.args ->> 'seq')::bigint)
    RETURNING j.args, j.queue, j.max_attempts
)
INSERT INTO tributary_event_lane_event (consumer, aggregate_id, seq, queue, max_attempts, args)
SELECT args ->> 'consumer', args ->> 'aggregate_id', (args ->> 'seq')::bigint, queue, max_attempts, args::text
FROM moved;

UPDATE tributary_event_consumer SET lane_events = true WHERE NOT lane_events;
ALTER TABLE tributary_event_consumer ALTER COLUMN lane_events SET DEFAULT true;
