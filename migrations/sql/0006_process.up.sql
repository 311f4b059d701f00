-- Liveness of worker processes. Every tributary worker process keeps one
-- row while it runs: id is the process's River client id (the value River
-- writes into river_job.attempted_by), heartbeat_at is refreshed every few
-- seconds and the row is deleted on a clean stop. A process whose heartbeat
-- is older than the liveness timeout is taken for dead: a leader-run sweep
-- makes its running jobs available again and sets swept_at, and the outbox
-- forwarder's stale-claim reset returns its claims to PENDING. A swept row
-- stays for a while (so claims and dashboards can still name the dead
-- process) and the sweep deletes it later; a process that finds its own row
-- swept has been declared dead and stops working.
--
-- No index besides the key: the table holds one row per running process,
-- which a scan reads at once, and an index on heartbeat_at would make every
-- heartbeat a non-HOT update that bloats it.
CREATE TABLE tributary_process (
    id           text        PRIMARY KEY,
    hostname     text        NOT NULL,
    pid          integer     NOT NULL,
    queues       text[]      NOT NULL,
    started_at   timestamptz NOT NULL,
    heartbeat_at timestamptz NOT NULL,
    swept_at     timestamptz
);
