package dashboard

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tributary-run/tributary/queue"
)

// SQL on tributary_dashboard_session (migration 0009). Every time is the
// dashboard's clock, passed in, so one process's decisions agree with each
// other and tests can move the clock.
const (
	insertSessionSQL = `
INSERT INTO /*schema*/tributary_dashboard_session (id, created_at, last_seen_at, expires_at)
VALUES ($1, $2, $2, $3)`

	// deleteDeadSessionsSQL runs at every login: dead rows only pile up
	// between logins, and there are few of those.
	deleteDeadSessionsSQL = `
DELETE FROM /*schema*/tributary_dashboard_session WHERE expires_at <= $1 OR last_seen_at <= $2`

	readSessionSQL = `
SELECT last_seen_at FROM /*schema*/tributary_dashboard_session
WHERE id = $1 AND expires_at > $2 AND last_seen_at > $3`

	touchSessionSQL = `
UPDATE /*schema*/tributary_dashboard_session SET last_seen_at = $2 WHERE id = $1 AND last_seen_at < $2`

	deleteSessionSQL = `DELETE FROM /*schema*/tributary_dashboard_session WHERE id = $1`
)

// sessionTouchEvery is how stale last_seen_at may get before a request
// writes it again: a page view costs a primary-key read, not a write, and
// the idle timeout is honoured to within this.
const sessionTouchEvery = time.Minute

// sessionStore keeps the form login's sessions in Postgres, so that every
// replica sees a logout at once.
type sessionStore struct {
	pool    *pgxpool.Pool
	schema  string
	ttl     time.Duration
	idle    time.Duration
	timeout time.Duration
}

// errSessionsMissing is a schema without migration 0009.
var errSessionsMissing = &httpError{status: http.StatusServiceUnavailable, msg: "the dashboard's session table (migration 0009) is missing: run `tributary migrate up`"}

func (st *sessionStore) q(sql string) string { return queue.Qualify(st.schema, sql) }

// dbError names a missing table plainly; anything else is wrapped.
func (st *sessionStore) dbError(what string, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P01" { // undefined_table
		return errSessionsMissing
	}
	return fmt.Errorf("error %s: %w", what, err)
}

// create stores a new session under id (the cookie secret's MAC) and
// deletes the dead ones.
func (st *sessionStore) create(ctx context.Context, id string, now time.Time) (expires time.Time, err error) {
	ctx, cancel := context.WithTimeout(ctx, st.timeout)
	defer cancel()
	expires = now.Add(st.ttl)
	err = pgx.BeginFunc(ctx, st.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, st.q(deleteDeadSessionsSQL), now, now.Add(-st.idle)); err != nil {
			return st.dbError("deleting expired dashboard sessions", err)
		}
		if _, err := tx.Exec(ctx, st.q(insertSessionSQL), id, now, expires); err != nil {
			return st.dbError("storing a dashboard session", err)
		}
		return nil
	})
	return expires, err
}

// valid reports whether session id exists, is within its lifetime and was
// used within the idle timeout; it records the use.
func (st *sessionStore) valid(ctx context.Context, id string, now time.Time) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, st.timeout)
	defer cancel()
	var lastSeen time.Time
	err := st.pool.QueryRow(ctx, st.q(readSessionSQL), id, now, now.Add(-st.idle)).Scan(&lastSeen)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return false, nil
	case err != nil:
		return false, st.dbError("reading a dashboard session", err)
	}
	if now.Sub(lastSeen) >= sessionTouchEvery {
		if _, err := st.pool.Exec(ctx, st.q(touchSessionSQL), id, now); err != nil {
			return false, st.dbError("recording the use of a dashboard session", err)
		}
	}
	return true, nil
}

// revoke deletes session id. Deleting one that is gone already is fine.
func (st *sessionStore) revoke(ctx context.Context, id string) error {
	ctx, cancel := context.WithTimeout(ctx, st.timeout)
	defer cancel()
	if _, err := st.pool.Exec(ctx, st.q(deleteSessionSQL), id); err != nil {
		return st.dbError("deleting a dashboard session", err)
	}
	return nil
}

// newSessionSecret is the cookie's value: 256 random bits.
func newSessionSecret() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("error generating a session secret: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}
