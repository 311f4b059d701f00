-- Login sessions of the dashboard's form login. The cookie holds a random
-- secret; id is an HMAC of it keyed by the dashboard token, so the table
-- holds nothing a cookie or the token can be recovered from, and a changed
-- token ends every session (their ids no longer match). Logging out deletes
-- the row, on whichever replica, so a copied cookie dies with it. A session
-- is valid while now < expires_at (absolute lifetime) and
-- now < last_seen_at + the idle timeout; each login deletes the rows that
-- are no longer valid, so the table holds at most the logins of one
-- lifetime and needs no index besides its key.
CREATE TABLE tributary_dashboard_session (
    id           text        PRIMARY KEY,
    created_at   timestamptz NOT NULL,
    last_seen_at timestamptz NOT NULL,
    expires_at   timestamptz NOT NULL
);
