-- The bookkeeping table for tributary's own migrations. River keeps its own
-- in river_migration.
CREATE TABLE tributary_migration (
    version    integer     PRIMARY KEY,
    name       text        NOT NULL,
    applied_at timestamptz NOT NULL
);
