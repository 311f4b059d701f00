package dashboard

import (
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const testToken = "s3cret-token"

// login posts the form and returns the session cookie and the CSRF token
// from the job page.
func login(t *testing.T, base string, jobID int64) (cookie, csrf string) {
	t.Helper()
	res := post(t, base, "/login", url.Values{"token": {testToken}, "next": {"/"}}, "Origin", base)
	require.Equal(t, http.StatusSeeOther, res.status, res.body)
	setCookie := res.header.Get("Set-Cookie")
	require.Contains(t, setCookie, "HttpOnly")
	require.Contains(t, setCookie, "SameSite=Strict")
	require.NotContains(t, setCookie, testToken, "the cookie never holds the token")
	cookie = strings.SplitN(setCookie, ";", 2)[0]

	req, err := http.NewRequest(http.MethodGet, fmt.Sprintf("%s/jobs/%d", base, jobID), nil)
	require.NoError(t, err)
	req.Header.Set("Cookie", cookie)
	page := do(t, req)
	m := regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`).FindStringSubmatch(page.body)
	require.NotNil(t, m, "the job page carries a CSRF token once logged in")
	return cookie, m[1]
}

func TestAuth(t *testing.T) {
	t.Parallel()

	actions := []string{"retry", "cancel", "delete"}

	t.Run("ReadOnlyWithoutTokenIs403", func(t *testing.T) {
		t.Parallel()
		srv, bundle := setupServer(t, Config{})
		require.True(t, srv.ReadOnly())
		id := insertJob(t, bundle.db, "k", "default", "discarded")
		for _, action := range actions {
			for _, headers := range [][]string{nil, {"Authorization", "Bearer anything"}, {"Authorization", "Bearer "}} {
				res := post(t, bundle.http.URL, fmt.Sprintf("/api/jobs/%d/%s", id, action), nil, headers...)
				require.Equal(t, http.StatusForbidden, res.status, res.body)
				require.Contains(t, res.body, "read-only")
			}
		}
		for _, path := range []string{"/api/outbox/replay-failed", "/api/schedules/x/trigger", "/api/amqp/q/replay", "/outbox/00000000-0000-0000-0000-000000000000/replay"} {
			require.Equal(t, http.StatusForbidden, post(t, bundle.http.URL, path, nil).status, path)
		}
		res := post(t, bundle.http.URL, "/login", url.Values{"token": {""}}, "Origin", bundle.http.URL)
		require.Equal(t, http.StatusForbidden, res.status)
		require.Empty(t, res.header.Get("Set-Cookie"))
		require.Equal(t, "discarded", jobState(t, bundle.db, id))
		require.Contains(t, get(t, bundle.http.URL, "/").body, "read-only")
	})

	t.Run("MissingOrWrongTokenIs401AndChangesNothing", func(t *testing.T) {
		t.Parallel()
		_, bundle := setupServer(t, Config{Token: testToken})
		id := insertJob(t, bundle.db, "k", "default", "discarded")
		for _, action := range actions {
			for _, headers := range [][]string{
				nil,
				{"Authorization", "Bearer wrong"},
				{"Authorization", "Bearer " + testToken + "x"},
				{"Authorization", "Basic " + testToken},
				{"Authorization", testToken},
				{"Cookie", sessionCookie + "=1999999999.deadbeef"},
				{"Cookie", sessionCookie + "=garbage"},
			} {
				for _, prefix := range []string{"/api", ""} {
					res := post(t, bundle.http.URL, fmt.Sprintf("%s/jobs/%d/%s", prefix, id, action), nil, headers...)
					require.Equal(t, http.StatusUnauthorized, res.status, "%s %v: %s", action, headers, res.body)
					require.Equal(t, `Bearer realm="tributary"`, res.header.Get("WWW-Authenticate"))
				}
			}
		}
		require.Equal(t, "discarded", jobState(t, bundle.db, id))
		require.Equal(t, 1, bundle.db.CountJobs(t))
	})

	t.Run("BearerTokenActs", func(t *testing.T) {
		t.Parallel()
		_, bundle := setupServer(t, Config{Token: testToken})
		id := insertJob(t, bundle.db, "k", "default", "discarded")
		auth := []string{"Authorization", "Bearer " + testToken}

		res := post(t, bundle.http.URL, fmt.Sprintf("/api/jobs/%d/retry", id), nil, auth...)
		require.Equal(t, http.StatusOK, res.status, res.body)
		var out jobActionResult
		res.json(t, &out)
		require.Equal(t, "available", out.Job.State)
		require.Equal(t, "available", jobState(t, bundle.db, id))

		res = post(t, bundle.http.URL, fmt.Sprintf("/api/jobs/%d/cancel", id), nil, auth...)
		require.Equal(t, http.StatusOK, res.status, res.body)
		require.Equal(t, "cancelled", jobState(t, bundle.db, id))

		res = post(t, bundle.http.URL, fmt.Sprintf("/api/jobs/%d/delete", id), nil, auth...)
		require.Equal(t, http.StatusOK, res.status, res.body)
		require.Equal(t, "", jobState(t, bundle.db, id))

		require.Equal(t, http.StatusNotFound, post(t, bundle.http.URL, fmt.Sprintf("/api/jobs/%d/retry", id), nil, auth...).status)
		require.Equal(t, http.StatusNotFound, post(t, bundle.http.URL, "/api/jobs/1/explode", nil, auth...).status)
		require.Equal(t, http.StatusBadRequest, post(t, bundle.http.URL, "/api/jobs/x/retry", nil, auth...).status)
	})

	t.Run("GetNeverChangesState", func(t *testing.T) {
		t.Parallel()
		_, bundle := setupServer(t, Config{Token: testToken})
		id := insertJob(t, bundle.db, "k", "default", "discarded")
		for _, action := range actions {
			for _, prefix := range []string{"/api", ""} {
				req, err := http.NewRequest(http.MethodGet, fmt.Sprintf("%s%s/jobs/%d/%s", bundle.http.URL, prefix, id, action), nil)
				require.NoError(t, err)
				req.Header.Set("Authorization", "Bearer "+testToken)
				res := do(t, req)
				require.NotEqual(t, http.StatusOK, res.status)
				require.GreaterOrEqual(t, res.status, 400)
			}
		}
		require.Equal(t, "discarded", jobState(t, bundle.db, id))
	})

	t.Run("CookieNeedsCSRFTokenAndSameOrigin", func(t *testing.T) {
		t.Parallel()
		_, bundle := setupServer(t, Config{Token: testToken})
		id := insertJob(t, bundle.db, "k", "default", "discarded")
		base := bundle.http.URL
		cookie, csrf := login(t, base, id)
		path := fmt.Sprintf("/jobs/%d/retry", id)

		// No CSRF token.
		res := post(t, base, path, nil, "Cookie", cookie, "Origin", base)
		require.Equal(t, http.StatusForbidden, res.status, res.body)
		require.Contains(t, res.body, "CSRF")
		// A wrong one.
		res = post(t, base, path, url.Values{"csrf": {strings.Repeat("0", len(csrf))}}, "Cookie", cookie, "Origin", base)
		require.Equal(t, http.StatusForbidden, res.status)
		// The right one from another origin.
		res = post(t, base, path, url.Values{"csrf": {csrf}}, "Cookie", cookie, "Origin", "http://evil.example")
		require.Equal(t, http.StatusForbidden, res.status)
		require.Contains(t, res.body, "cross-origin")
		res = post(t, base, path, url.Values{"csrf": {csrf}}, "Cookie", cookie, "Referer", "http://evil.example/page")
		require.Equal(t, http.StatusForbidden, res.status)
		// Neither Origin nor Referer.
		res = post(t, base, path, url.Values{"csrf": {csrf}}, "Cookie", cookie)
		require.Equal(t, http.StatusForbidden, res.status)
		require.Equal(t, "discarded", jobState(t, bundle.db, id), "no refused request changed the job")

		// All of it: the action runs and the page redirects back to the job.
		res = post(t, base, path, url.Values{"csrf": {csrf}}, "Cookie", cookie, "Origin", base)
		require.Equal(t, http.StatusSeeOther, res.status, res.body)
		require.Equal(t, fmt.Sprintf("/jobs/%d", id), res.header.Get("Location"))
		require.Equal(t, "available", jobState(t, bundle.db, id))
		// Referer instead of Origin works too, and the header form of the token.
		res = post(t, base, fmt.Sprintf("/api/jobs/%d/cancel", id), nil, "Cookie", cookie, "Referer", base+"/jobs", "X-CSRF-Token", csrf)
		require.Equal(t, http.StatusOK, res.status, res.body)
		require.Equal(t, "cancelled", jobState(t, bundle.db, id))
	})

	t.Run("LoginForm", func(t *testing.T) {
		t.Parallel()
		srv, bundle := setupServer(t, Config{Token: testToken, SessionTTL: time.Hour})
		base := bundle.http.URL
		res := post(t, base, "/login", url.Values{"token": {"nope"}}, "Origin", base)
		require.Equal(t, http.StatusUnauthorized, res.status)
		require.Contains(t, res.body, "Wrong token")
		require.Empty(t, res.header.Get("Set-Cookie"))

		res = post(t, base, "/login", url.Values{"token": {testToken}}, "Origin", "http://evil.example")
		require.Equal(t, http.StatusForbidden, res.status)
		require.Empty(t, res.header.Get("Set-Cookie"))

		// Only local redirects after login.
		res = post(t, base, "/login", url.Values{"token": {testToken}, "next": {"//evil.example/x"}}, "Origin", base)
		require.Equal(t, http.StatusSeeOther, res.status)
		require.Equal(t, "/", res.header.Get("Location"))

		// An expired session is refused.
		id := insertJob(t, bundle.db, "k", "default", "discarded")
		cookie, csrf := login(t, base, id)
		srv.auth.nowFunc = func() time.Time { return time.Now().Add(2 * time.Hour) }
		res = post(t, base, fmt.Sprintf("/jobs/%d/retry", id), url.Values{"csrf": {csrf}}, "Cookie", cookie, "Origin", base)
		require.Equal(t, http.StatusUnauthorized, res.status)
		require.Equal(t, "discarded", jobState(t, bundle.db, id))
	})

	t.Run("RunningJobCannotBeDeleted", func(t *testing.T) {
		t.Parallel()
		_, bundle := setupServer(t, Config{Token: testToken})
		id := insertJob(t, bundle.db, "k", "default", "running")
		res := post(t, bundle.http.URL, fmt.Sprintf("/api/jobs/%d/delete", id), nil, "Authorization", "Bearer "+testToken)
		require.Equal(t, http.StatusConflict, res.status, res.body)
		require.Equal(t, "running", jobState(t, bundle.db, id))
	})
}
