-- Listing and counting workflows by a finished status (failed, completed,
-- cancelled), newest first: the dashboard's status filter and its capped
-- counts per status walk this index instead of the whole table. Running
-- workflows have their own partial index (0010).
CREATE INDEX tributary_workflow_status_idx ON tributary_workflow (status, id);
