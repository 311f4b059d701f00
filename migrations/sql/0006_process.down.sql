DROP TABLE IF EXISTS tributary_process;
