-- Workflows II (jobs/workflow): durable steps, sleeps, signals, child
-- workflows and per-key concurrency.
--
-- tributary_workflow_step records what a task's run did, keyed by the run's
-- job (a Retry gives the task a new job, so a new run starts with no steps)
-- and the step's name: a Step's output once it succeeded, a Sleep's wake-up
-- time, an AwaitSignal's deadline and, once it returned, the signal it got
-- (or that it timed out), a child workflow's id. A retried or rescued attempt
-- of the same job finds them and does not run them again. The primary key is
-- what makes a StepTx exactly once: its function runs in the transaction
-- that inserts the row, and a second attempt's insert waits for the first
-- and then conflicts.
CREATE TABLE tributary_workflow_step (
    job_id      bigint      NOT NULL,
    name        text        NOT NULL,
    workflow_id uuid        NOT NULL REFERENCES tributary_workflow (id) ON DELETE CASCADE,
    task        text        NOT NULL,
    kind        text        NOT NULL CHECK (kind IN ('step', 'sleep', 'signal', 'child')),
    output      jsonb,
    wake_at     timestamptz,
    done        boolean     NOT NULL,
    timed_out   boolean     NOT NULL DEFAULT false,
    created_at  timestamptz NOT NULL,
    done_at     timestamptz,
    PRIMARY KEY (job_id, name)
);
CREATE INDEX tributary_workflow_step_task_idx ON tributary_workflow_step (workflow_id, task);
-- SignalTx finds the tasks waiting for a signal (name is 'signal:' || the
-- signal's name).
CREATE INDEX tributary_workflow_step_waiting_idx ON tributary_workflow_step (workflow_id, name) WHERE kind = 'signal' AND NOT done;

-- Signals sent to a workflow. A signal waits here until an AwaitSignal of
-- its name consumes it (oldest first), so one sent before the wait is not
-- lost; an idempotency key makes a second send of it do nothing.
CREATE TABLE tributary_workflow_signal (
    id              bigserial   PRIMARY KEY,
    workflow_id     uuid        NOT NULL REFERENCES tributary_workflow (id) ON DELETE CASCADE,
    name            text        NOT NULL,
    payload         jsonb       NOT NULL,
    idempotency_key text,
    created_at      timestamptz NOT NULL,
    consumed_job_id bigint,
    consumed_task   text,
    consumed_at     timestamptz
);
CREATE UNIQUE INDEX tributary_workflow_signal_key_idx ON tributary_workflow_signal (workflow_id, idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE INDEX tributary_workflow_signal_unconsumed_idx ON tributary_workflow_signal (workflow_id, name, id) WHERE consumed_at IS NULL;

-- A child workflow names the task that started it (its parent hears of its
-- end as a signal, and cancelling the parent cancels it). A workflow with a
-- concurrency key waits (queued) while limit workflows of its key run: its
-- first tasks are pending on one extra dependency, its admission.
ALTER TABLE tributary_workflow
    ADD COLUMN parent_workflow_id uuid,
    ADD COLUMN parent_task        text,
    ADD COLUMN concurrency_key    text,
    ADD COLUMN concurrency_limit  integer,
    ADD COLUMN queued             boolean NOT NULL DEFAULT false;
CREATE INDEX tributary_workflow_parent_idx ON tributary_workflow (parent_workflow_id) WHERE parent_workflow_id IS NOT NULL;
CREATE INDEX tributary_workflow_queued_idx ON tributary_workflow (concurrency_key, id) WHERE queued;

-- One row per concurrency key: how many of its workflows are admitted and
-- not finished. Its row lock orders admissions of the key.
CREATE TABLE tributary_workflow_concurrency (
    key     text    PRIMARY KEY,
    running integer NOT NULL CHECK (running >= 0)
);
