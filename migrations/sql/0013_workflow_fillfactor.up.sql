-- Room on each page for the updates of a workflow's rows, which every task
-- completion makes (docs/ARCHITECTURE.md, workflows, "Plans").
--
-- A workflow's row changes once per completion transaction that touches
-- it (its counts and updated_at), and no index covers those columns, so
-- the update can stay on its page (HOT: no new index entries) if the page
-- has room. At the default fillfactor of 100 pages are full from the
-- insert, and each update wrote a new row version elsewhere with entries
-- in all seven of the table's indexes: updating 50 workflows of a
-- 4,000-row table took 1.3 to 9.3 ms, against 0.8 ms with fillfactor 50
-- (every update HOT).
--
-- A task's row changes state on every update (an indexed column), so its
-- updates are never HOT; the room lets the new version stay on its page
-- instead of extending the table for each one.
ALTER TABLE tributary_workflow SET (fillfactor = 50);
ALTER TABLE tributary_workflow_task SET (fillfactor = 70);
