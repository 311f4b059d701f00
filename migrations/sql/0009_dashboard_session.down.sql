DROP TABLE IF EXISTS tributary_dashboard_session;
