DROP INDEX IF EXISTS tributary_dispatch_unfinished_idx;
