package dashboard

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestSessions: a login session lives in Postgres, so logging out revokes
// it on every replica, and it ends after an idle time and an absolute
// lifetime.
func TestSessions(t *testing.T) {
	t.Parallel()

	t.Run("LogoutRevokesTheSessionOnEveryReplica", func(t *testing.T) {
		t.Parallel()
		_, bundle := setupServer(t, Config{Token: testToken})
		// A second replica: its own Server on the same schema and token.
		replica, err := New(bundle.client, Config{Token: testToken, Logger: bundle.client.Logger()})
		require.NoError(t, err)
		other := httptest.NewServer(replica.Handler())
		t.Cleanup(other.Close)

		base := bundle.http.URL
		id := insertJob(t, bundle.db, "k", "default", "discarded")
		cookie, csrf := login(t, base, id)
		// The session works on the replica that did not issue it.
		res := post(t, other.URL, fmt.Sprintf("/api/jobs/%d/retry", id), nil, "Cookie", cookie, "Origin", other.URL, "X-CSRF-Token", csrf)
		require.Equal(t, http.StatusOK, res.status, res.body)

		res = post(t, base, "/logout", nil, "Cookie", cookie, "Origin", base)
		require.Equal(t, http.StatusSeeOther, res.status, res.body)
		require.Contains(t, res.header.Get("Set-Cookie"), sessionCookie+"=;")

		// The old cookie and its CSRF token, replayed after the logout.
		for _, srv := range []string{base, other.URL} {
			res = post(t, srv, fmt.Sprintf("/jobs/%d/cancel", id), url.Values{"csrf": {csrf}}, "Cookie", cookie, "Origin", srv)
			require.Equal(t, http.StatusUnauthorized, res.status, "replayed cookie on %s: %s", srv, res.body)
		}
		require.Equal(t, "available", jobState(t, bundle.db, id), "the replayed cookie cancelled nothing")
		page := get(t, base, fmt.Sprintf("/jobs/%d", id))
		require.NotContains(t, page.body, `name="csrf"`)
	})

	t.Run("IdleAndAbsoluteExpiry", func(t *testing.T) {
		t.Parallel()
		srv, bundle := setupServer(t, Config{Token: testToken, SessionTTL: 3 * time.Hour, SessionIdleTimeout: time.Hour})
		base := bundle.http.URL
		id := insertJob(t, bundle.db, "k", "default", "discarded")
		start := time.Now()
		clock := start
		srv.auth.nowFunc = func() time.Time { return clock }
		cookie, csrf := login(t, base, id)
		act := func(action string) response {
			return post(t, base, fmt.Sprintf("/api/jobs/%d/%s", id, action), nil, "Cookie", cookie, "Origin", base, "X-CSRF-Token", csrf)
		}
		// Used every 50 minutes, it outlives the idle timeout...
		for _, at := range []time.Duration{50 * time.Minute, 100 * time.Minute, 150 * time.Minute} {
			clock = start.Add(at)
			res := act("retry")
			require.Equal(t, http.StatusOK, res.status, "at +%s: %s", at, res.body)
		}
		// ...but not the absolute lifetime.
		clock = start.Add(3*time.Hour + time.Minute)
		require.Equal(t, http.StatusUnauthorized, act("cancel").status)

		// A fresh session left alone for longer than the idle timeout.
		clock = start
		cookie, csrf = login(t, base, id)
		clock = start.Add(61 * time.Minute)
		res := act("cancel")
		require.Equal(t, http.StatusUnauthorized, res.status, res.body)
		require.Equal(t, "available", jobState(t, bundle.db, id))
	})

	t.Run("LoginDeletesExpiredSessions", func(t *testing.T) {
		t.Parallel()
		srv, bundle := setupServer(t, Config{Token: testToken, SessionTTL: time.Hour})
		base := bundle.http.URL
		start := time.Now()
		clock := start
		srv.auth.nowFunc = func() time.Time { return clock }
		for range 3 {
			res := post(t, base, "/login", url.Values{"token": {testToken}}, "Origin", base)
			require.Equal(t, http.StatusSeeOther, res.status)
		}
		require.Equal(t, 3, countSessions(t, bundle))
		clock = start.Add(2 * time.Hour)
		res := post(t, base, "/login", url.Values{"token": {testToken}}, "Origin", base)
		require.Equal(t, http.StatusSeeOther, res.status)
		require.Equal(t, 1, countSessions(t, bundle), "the three expired sessions are gone, the new one stays")
	})

	t.Run("RepeatedFailedLoginsAreSlowed", func(t *testing.T) {
		t.Parallel()
		srv, bundle := setupServer(t, Config{Token: testToken})
		base := bundle.http.URL
		start := time.Now()
		clock := start
		srv.auth.nowFunc = func() time.Time { return clock }
		try := func(token string) response {
			return post(t, base, "/login", url.Values{"token": {token}}, "Origin", base)
		}
		for i := range LoginFailuresFree {
			res := try(fmt.Sprintf("guess-%d", i))
			require.Equal(t, http.StatusUnauthorized, res.status, "failure %d", i+1)
		}
		res := try("guess-again")
		require.Equal(t, http.StatusTooManyRequests, res.status, res.body)
		retry, err := strconv.Atoi(res.header.Get("Retry-After"))
		require.NoError(t, err, "Retry-After: %q", res.header.Get("Retry-After"))
		require.Positive(t, retry)
		require.Contains(t, res.body, "Too many failed logins")

		// While slowed down even the right token is refused, so guessing
		// cannot go on at full speed.
		res = try(testToken)
		require.Equal(t, http.StatusTooManyRequests, res.status)
		require.Empty(t, res.header.Get("Set-Cookie"))

		// Another failure after the wait doubles it.
		clock = start.Add(time.Duration(retry)*time.Second + time.Second)
		res = try("guess-late")
		require.Equal(t, http.StatusTooManyRequests, res.status)
		retry2, err := strconv.Atoi(res.header.Get("Retry-After"))
		require.NoError(t, err)
		require.Equal(t, 2*retry, retry2)

		// After the wait the right token logs in and clears the record.
		clock = clock.Add(time.Duration(retry2)*time.Second + time.Second)
		res = try(testToken)
		require.Equal(t, http.StatusSeeOther, res.status, res.body)
		require.Equal(t, http.StatusUnauthorized, try("one-typo").status)
	})
}

func countSessions(t *testing.T, b *testBundle) int {
	t.Helper()
	var n int
	require.NoError(t, b.db.Pool.QueryRow(context.Background(), b.db.Q(`SELECT count(*) FROM /*schema*/tributary_dashboard_session`)).Scan(&n))
	return n
}
