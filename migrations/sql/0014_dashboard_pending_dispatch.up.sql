-- Unfinished dispatch jobs by consumer, for the pending-dispatches count of
-- the consumers page and /metrics (riverjob.CountUnfinishedDispatches).
-- Without it the count intersected River's state index with its kind index
-- (a BitmapAnd over every unfinished job and every dispatch job ever kept):
-- 232 ms at 10,000,000 jobs, growing with the table. Partial, it holds only
-- the dispatch jobs not yet finalized (River's check constraint makes
-- finalized_at NULL exactly the states available, pending, retryable,
-- running and scheduled), so it is as small as the backlog: a dispatch job
-- adds an entry when inserted and when it starts (the state change is never
-- a HOT update, River's fetch index has the state), none once it finishes.
CREATE INDEX IF NOT EXISTS tributary_dispatch_unfinished_idx ON river_job ((args ->> 'consumer'))
    WHERE finalized_at IS NULL AND kind IN ('tributary.event.dispatch', 'tributary.event.dispatch_batch');
