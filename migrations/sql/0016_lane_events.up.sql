-- Lane events: the events waiting behind a lane's head for a consumer whose
-- lanes chain (ConsumerConfig.LaneChain). Before, each waited as a pending
-- River dispatch job, and a River job row costs three versions (inserted
-- pending, made running, completed), each written into river_job's seven
-- indexes (GIN on args and metadata among them). A lane event is a row of
-- this light table instead (its primary key is its only index). A lane
-- chain runs it in place from here (claimed, then deleted when recorded),
-- with no River job at all; a promotion inserts its dispatch job as
-- available and deletes the row, and so does a failure, with the job in the
-- state River would have left it (docs/ARCHITECTURE.md, "Lane events").
CREATE TABLE IF NOT EXISTS tributary_event_lane_event (
    consumer     text     NOT NULL,
    aggregate_id text     NOT NULL,
    seq          bigint   NOT NULL,
    queue        text     NOT NULL,
    max_attempts smallint NOT NULL,
    args         jsonb    NOT NULL,
    -- The process whose lane chain runs the event now (and since when):
    -- a claimed lane event is not promoted; the repair sweep takes it back
    -- from a dead process. Not indexed, so a claim is a HOT update.
    claimed_by   text,
    claimed_at   timestamptz,
    PRIMARY KEY (consumer, aggregate_id, seq)
);

-- Whether the bus writes the consumer's lane events to that table (its
-- lanes chain) or as pending dispatch jobs.
ALTER TABLE tributary_event_consumer DROP COLUMN IF EXISTS lane_events;
ALTER TABLE tributary_event_consumer ADD COLUMN lane_events boolean NOT NULL DEFAULT false;
