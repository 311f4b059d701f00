-- Run-time overrides of a limit's Total and Rate (with its period), beside
-- max_override (migration 0027): `tributary limits set NAME --total N
-- --rate N --period D` writes them, `--reset` clears them, and every
-- admitter uses the value in force (the override, else the declaration)
-- at its next pass. NULL: no override. A rate override needs a declared
-- rate (the limits package refuses one without), so migration 0029's
-- rate door, which reads the declared rate, keeps saying whether a limit
-- has one.
ALTER TABLE tributary_limit
    ADD COLUMN IF NOT EXISTS total_override     integer CHECK (total_override >= 1),
    ADD COLUMN IF NOT EXISTS rate_override      integer CHECK (rate_override >= 1),
    ADD COLUMN IF NOT EXISTS period_override_ms bigint  CHECK (period_override_ms >= 1);
