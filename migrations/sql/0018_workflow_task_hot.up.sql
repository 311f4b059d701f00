-- Task row updates that stay on their page (HOT: no new index entries).
--
-- Every change of a workflow task (its outcome recorded, a dependency
-- counted, its release, a cancel) writes state and updated_at. The two
-- partial indexes of the repair sweep read both (state in their predicates,
-- updated_at as their key), so no task update was HOT: each wrote a new row
-- version with an entry in every index of the table. The sweep now pages
-- through the running workflows (tributary_workflow_running_idx) and reads
-- their tasks by primary key (docs/ARCHITECTURE.md, workflows, "Repair
-- sweep"), so the primary key is the table's only index and no update
-- changes a column of it. Fillfactor 50 leaves each page room for the
-- versions a task's few updates write (at 70, a quarter of them found
-- none in bench workflows; docs/BENCHMARKS.md).
DROP INDEX IF EXISTS tributary_workflow_task_active_idx;
DROP INDEX IF EXISTS tributary_workflow_task_undecided_idx;
ALTER TABLE tributary_workflow_task SET (fillfactor = 50);
