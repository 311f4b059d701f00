package dashboard

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestBadQueryIs400 sends query strings that do not parse, unknown or
// repeated parameters and values Postgres cannot hold to every list page,
// HTML and /api/: each is a 400 naming what was wrong, never a page that
// ignored the filter and never a 500 with Postgres' text.
func TestBadQueryIs400(t *testing.T) {
	t.Parallel()

	_, bundle := setupServer(t, Config{Token: testToken})
	insertJob(t, bundle.db, "k", "default", "completed")
	insertJob(t, bundle.db, "k", "default", "available")

	cases := []struct {
		path string
		want string // part of the message
	}{
		{"/jobs?kind=%F0%9F%98%80%00", `invalid kind`},
		{"/jobs?kind=%FF", `invalid kind`},
		{"/jobs?queue=%00", `invalid queue`},
		{"/jobs?queue=a%0Ab", `invalid queue`},
		{"/jobs?cursor=garbage", `unknown parameter "cursor"`},
		{"/jobs?state=x;y", `invalid query string`},
		{"/jobs?kind=%zz", `invalid query string`},
		{"/jobs?state=running&state=completed", `parameter "state" given 2 times`},
		{"/outbox?status=SENT;x", `invalid query string`},
		{"/outbox?cursor=1", `unknown parameter "cursor"`},
		{"/outbox?status=%FF", `invalid status`},
		{"/batches?stream=a;b", `invalid query string`},
		{"/batches?page=2", `unknown parameter "page"`},
		{"/schedules?name=x", `unknown parameter "name"`},
		{"/schedules?%zz", `invalid query string`},
		{"/amqp?queue=x", `unknown parameter "queue"`},
		{"/?state=x;y", `invalid query string`},
		{"/jobs/1?x=1", `unknown parameter "x"`},
	}
	for _, tc := range cases {
		for _, prefix := range []string{"/api", ""} {
			path := prefix + tc.path
			if path == "/api/?state=x;y" {
				path = "/api/overview?state=x;y"
			}
			res := get(t, bundle.http.URL, path)
			require.Equal(t, http.StatusBadRequest, res.status, "%s: %s", path, res.body)
			body := res.body
			if prefix == "" {
				body = strings.ReplaceAll(body, "&#34;", `"`)
			} else {
				body = strings.ReplaceAll(body, `\"`, `"`)
			}
			require.Contains(t, body, tc.want, path)
			require.NotContains(t, body, "SQLSTATE", path)
		}
	}

	// Schedule names in action paths get the same check.
	auth := []string{"Authorization", "Bearer " + testToken}
	for _, name := range []string{"%00", "%FF", "a%0Ab"} {
		res := post(t, bundle.http.URL, "/api/schedules/"+name+"/trigger", nil, auth...)
		require.Equal(t, http.StatusBadRequest, res.status, "%s: %s", name, res.body)
		require.Contains(t, res.body, "invalid schedule name")
		require.NotContains(t, res.body, "SQLSTATE")
	}
	// A query or form body that does not parse is refused before the action
	// runs: `limit=5;x` must not replay a whole dead-letter queue.
	res := post(t, bundle.http.URL, "/api/jobs/1/retry?x;y", nil, auth...)
	require.Equal(t, http.StatusBadRequest, res.status, res.body)
	req, err := http.NewRequest(http.MethodPost, bundle.http.URL+"/api/amqp/orders/replay", strings.NewReader("limit=5;x"))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Authorization", "Bearer "+testToken)
	res = do(t, req)
	require.Equal(t, http.StatusBadRequest, res.status, res.body)
	require.Contains(t, res.body, "invalid query string or form body")

	// Good queries still work, empty form fields included.
	for _, path := range []string{"/api/jobs?state=&kind=&queue=", "/jobs?state=completed&kind=k&queue=default&limit=10", "/api/outbox?status=", "/api/batches?stream=", "/api/schedules", "/api/amqp", "/api/overview", "/"} {
		res := get(t, bundle.http.URL, path)
		require.Equal(t, http.StatusOK, res.status, "%s: %s", path, res.body)
	}
}
