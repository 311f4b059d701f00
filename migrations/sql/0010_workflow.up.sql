-- Workflows: DAGs of River jobs (jobs/workflow).
--
-- tributary_workflow is one row per workflow instance. It is also the lock
-- every change of the workflow's tasks takes first (SELECT ... FOR UPDATE in
-- id order), so completions, cancels and retries of one workflow are
-- serialised and never wait for each other's task rows in a cycle. The
-- tasks_* columns count its tasks per state; they are kept by every change,
-- so a listing never counts task rows. status leaves 'running' when no task
-- is pending or active; finished_at is set then, and retention deletes the
-- row (with its tasks) once finished_at is past it.
CREATE TABLE tributary_workflow (
    id              uuid        PRIMARY KEY,
    key             text        UNIQUE,
    name            text        NOT NULL,
    status          text        NOT NULL CHECK (status IN ('running', 'completed', 'failed', 'cancelled')),
    input           jsonb,
    task_count      integer     NOT NULL,
    tasks_pending   integer     NOT NULL,
    tasks_active    integer     NOT NULL,
    tasks_completed integer     NOT NULL,
    tasks_failed    integer     NOT NULL,
    tasks_cancelled integer     NOT NULL,
    tasks_skipped   integer     NOT NULL,
    created_at      timestamptz NOT NULL,
    updated_at      timestamptz NOT NULL,
    finished_at     timestamptz
);
-- Retention deletes finished workflows by finished_at.
CREATE INDEX tributary_workflow_finished_idx ON tributary_workflow (finished_at) WHERE finished_at IS NOT NULL;
-- Listing by name, newest first (ids are UUIDv7, so id order is creation order).
CREATE INDEX tributary_workflow_name_idx ON tributary_workflow (name, id);
-- Listing running workflows.
CREATE INDEX tributary_workflow_running_idx ON tributary_workflow (id) WHERE status = 'running';

-- One row per task, keyed by (workflow, name) and not by job: a retry gives
-- the task a new job (job_id, run + 1) and the row keeps its history. The
-- row holds everything needed to show and re-run the task after River's job
-- cleaner deleted its jobs: kind, args and insert options, attempts, errors
-- and output.
--
-- state: pending (waiting for dependencies; its job is River-pending),
-- active (its job was released to River: available, running, retryable or
-- scheduled there), completed, failed (its job was discarded, or cancelled
-- itself), cancelled (by an operator, or because a dependency failed), and
-- skipped (not run; counts as done for its dependents).
--
-- pending_deps counts dependencies not yet resolved, failed_deps those
-- that resolved failed or cancelled. dependents is the reverse of deps, so
-- a finished task finds the tasks waiting for it without a scan.
CREATE TABLE tributary_workflow_task (
    workflow_id    uuid        NOT NULL REFERENCES tributary_workflow (id) ON DELETE CASCADE,
    name           text        NOT NULL,
    position       integer     NOT NULL,
    kind           text        NOT NULL,
    args           jsonb       NOT NULL,
    queue          text        NOT NULL,
    priority       smallint    NOT NULL,
    max_attempts   integer     NOT NULL,
    tags           text[]      NOT NULL,
    metadata       jsonb       NOT NULL,
    deps           text[]      NOT NULL,
    dependents     text[]      NOT NULL,
    pending_deps   integer     NOT NULL,
    failed_deps    integer     NOT NULL,
    on_dep_failure text        NOT NULL CHECK (on_dep_failure IN ('cancel', 'skip', 'run')),
    run_if         jsonb,
    state          text        NOT NULL CHECK (state IN ('pending', 'active', 'completed', 'failed', 'cancelled', 'skipped')),
    job_id         bigint      NOT NULL,
    run            integer     NOT NULL,
    attempts       integer     NOT NULL,
    errors         jsonb       NOT NULL,
    output         jsonb,
    created_at     timestamptz NOT NULL,
    updated_at     timestamptz NOT NULL,
    ready_at       timestamptz,
    started_at     timestamptz,
    finished_at    timestamptz,
    PRIMARY KEY (workflow_id, name)
);
-- The repair sweep pages through active tasks quiet for a while, and looks
-- at pending tasks left with nothing to wait for (by construction none).
CREATE INDEX tributary_workflow_task_active_idx ON tributary_workflow_task (updated_at, workflow_id, name) WHERE state = 'active';
CREATE INDEX tributary_workflow_task_undecided_idx ON tributary_workflow_task (updated_at) WHERE state = 'pending' AND pending_deps = 0;
