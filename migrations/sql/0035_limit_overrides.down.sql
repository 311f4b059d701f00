-- The overrides of Total and Rate are dropped: the declared values apply.
ALTER TABLE tributary_limit
    DROP COLUMN IF EXISTS period_override_ms,
    DROP COLUMN IF EXISTS rate_override,
    DROP COLUMN IF EXISTS total_override;
