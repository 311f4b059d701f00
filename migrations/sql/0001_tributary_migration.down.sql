DROP TABLE IF EXISTS tributary_migration;
