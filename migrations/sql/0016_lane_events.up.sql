-- Lane events: the events waiting behind a lane's head for a consumer whose
-- lanes chain (ConsumerConfig.LaneChain). Before, each waited as a pending
-- River dispatch job, and a River job row costs three versions (inserted
-- pending, made running, completed), each written into river_job's seven
-- indexes (GIN on args and metadata among them). A lane event is a row of
-- this light table instead (its primary key is its only index); when its
-- turn comes, the promotion or the chain's claim that would have updated
-- the pending job inserts its dispatch job straight as available or running
-- and deletes the row, in the same statement (docs/ARCHITECTURE.md,
-- "Lane events").
CREATE TABLE IF NOT EXISTS tributary_event_lane_event (
    consumer     text     NOT NULL,
    aggregate_id text     NOT NULL,
    seq          bigint   NOT NULL,
    queue        text     NOT NULL,
    max_attempts smallint NOT NULL,
    args         jsonb    NOT NULL,
    PRIMARY KEY (consumer, aggregate_id, seq)
);

-- Whether the bus writes the consumer's lane events to that table (its
-- lanes chain) or as pending dispatch jobs.
ALTER TABLE tributary_event_consumer DROP COLUMN IF EXISTS lane_events;
ALTER TABLE tributary_event_consumer ADD COLUMN lane_events boolean NOT NULL DEFAULT false;
