-- Liveness of worker processes. Every tributary worker process keeps one
-- row while it runs: id is the process's River client id (the value River
-- writes into river_job.attempted_by), heartbeat_at is refreshed every few
-- seconds and the row is deleted on a clean stop. A process whose heartbeat
-- is older than the liveness timeout is taken for dead: a leader-run sweep
-- makes its running jobs available again, and the outbox forwarder's
-- stale-claim reset returns its claims to PENDING.
CREATE TABLE tributary_process (
    id           text        PRIMARY KEY,
    hostname     text        NOT NULL,
    pid          integer     NOT NULL,
    queues       text[]      NOT NULL,
    started_at   timestamptz NOT NULL,
    heartbeat_at timestamptz NOT NULL
);
CREATE INDEX tributary_process_heartbeat_idx ON tributary_process (heartbeat_at);
