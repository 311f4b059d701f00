package dashboard

import (
	"fmt"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestJobsAPI(t *testing.T) {
	t.Parallel()

	t.Run("FiltersByStateKindAndQueue", func(t *testing.T) {
		t.Parallel()
		_, bundle := setupServer(t, Config{})
		a := insertJob(t, bundle.db, "k.one", "default", "available")
		b := insertJob(t, bundle.db, "k.two", "default", "completed")
		c := insertJob(t, bundle.db, "k.one", "other", "discarded")

		ids := func(path string) []int64 {
			res := get(t, bundle.http.URL, path)
			require.Equal(t, 200, res.status, res.body)
			var page JobPage
			res.json(t, &page)
			out := []int64{}
			for _, j := range page.Jobs {
				out = append(out, j.ID)
			}
			return out
		}
		require.Equal(t, []int64{c, b, a}, ids("/api/jobs"))
		require.Equal(t, []int64{b}, ids("/api/jobs?state=completed"))
		require.Equal(t, []int64{c, a}, ids("/api/jobs?kind=k.one"))
		require.Equal(t, []int64{c}, ids("/api/jobs?queue=other"))
		require.Equal(t, []int64{a}, ids("/api/jobs?kind=k.one&queue=default&state=available"))

		// The HTML page answers too and names the jobs.
		res := get(t, bundle.http.URL, "/jobs?state=discarded")
		require.Equal(t, 200, res.status)
		require.Contains(t, res.body, fmt.Sprintf(`href="/jobs/%d"`, c))
		require.NotContains(t, res.body, fmt.Sprintf(`href="/jobs/%d"`, a))
	})

	t.Run("KeysetPagination", func(t *testing.T) {
		t.Parallel()
		_, bundle := setupServer(t, Config{})
		var want []int64
		for range 7 {
			want = append([]int64{insertJob(t, bundle.db, "k", "default", "completed")}, want...)
		}
		var got []int64
		path := "/api/jobs?limit=3"
		pages := 0
		for path != "" {
			res := get(t, bundle.http.URL, path)
			require.Equal(t, 200, res.status, res.body)
			var page JobPage
			res.json(t, &page)
			pages++
			for _, j := range page.Jobs {
				got = append(got, j.ID)
			}
			path = ""
			if page.NextBefore != 0 {
				path = fmt.Sprintf("/api/jobs?limit=3&before=%d", page.NextBefore)
			}
		}
		require.Equal(t, want, got, "every job once, newest first")
		require.Equal(t, 3, pages)
	})

	t.Run("BadInputIs400NamingTheValue", func(t *testing.T) {
		t.Parallel()
		_, bundle := setupServer(t, Config{})
		long := make([]byte, 200)
		for i := range long {
			long[i] = 'x'
		}
		for path, want := range map[string]string{
			"/api/jobs?state=exploded":                   `invalid state \"exploded\"`,
			"/api/jobs?limit=0":                          `invalid limit \"0\"`,
			"/api/jobs?limit=abc":                        `invalid limit \"abc\"`,
			"/api/jobs?limit=100000":                     `invalid limit \"100000\"`,
			"/api/jobs?before=-4":                        `before=\"-4\"`,
			"/api/jobs?before=1e9":                       `before=\"1e9\"`,
			"/api/jobs?kind=" + string(long):             `invalid kind`,
			"/api/jobs/abc":                              `invalid job id \"abc\"`,
			"/api/jobs/0":                                `invalid job id \"0\"`,
			"/api/outbox?status=LOST":                    `invalid status \"LOST\"`,
			"/jobs?state=" + url.QueryEscape("<script>"): `invalid state &#34;&lt;script&gt;&#34;`,
		} {
			res := get(t, bundle.http.URL, path)
			require.Equal(t, 400, res.status, path)
			require.Contains(t, res.body, want, path)
		}
	})

	t.Run("UnknownJobIs404", func(t *testing.T) {
		t.Parallel()
		_, bundle := setupServer(t, Config{})
		res := get(t, bundle.http.URL, "/api/jobs/987654321")
		require.Equal(t, 404, res.status)
		require.Contains(t, res.body, "job 987654321 not found")
		res = get(t, bundle.http.URL, "/jobs/987654321")
		require.Equal(t, 404, res.status)
		require.Contains(t, res.body, "job 987654321 not found")
	})

	t.Run("SQLMetacharactersChangeNothing", func(t *testing.T) {
		t.Parallel()
		_, bundle := setupServer(t, Config{})
		id := insertJob(t, bundle.db, "k", "default", "completed")
		before := bundle.db.CountJobs(t)
		for _, evil := range []string{
			"'; DELETE FROM river_job; --",
			`" OR 1=1 --`,
			"default' OR '1'='1",
			`\'; DROP TABLE river_job; --`,
			"%_%",
			"k' UNION SELECT * FROM pg_shadow --",
		} {
			for _, field := range []string{"kind", "queue"} {
				res := get(t, bundle.http.URL, "/api/jobs?"+field+"="+url.QueryEscape(evil))
				require.Equal(t, 200, res.status, res.body)
				var page JobPage
				res.json(t, &page)
				require.Empty(t, page.Jobs, "%s=%q matches nothing", field, evil)
				res = get(t, bundle.http.URL, "/jobs?"+field+"="+url.QueryEscape(evil))
				require.Equal(t, 200, res.status)
			}
		}
		require.Equal(t, before, bundle.db.CountJobs(t))
		require.Equal(t, "completed", jobState(t, bundle.db, id))
	})

	t.Run("JobDetail", func(t *testing.T) {
		t.Parallel()
		_, bundle := setupServer(t, Config{})
		id := insertJob(t, bundle.db, "k.detail", "default", "discarded")
		_, err := bundle.db.Pool.Exec(t.Context(), bundle.db.Q(`UPDATE /*schema*/river_job SET attempt = 2, max_attempts = 2, attempted_at = now(),
			errors = ARRAY['{"at":"2026-01-01T00:00:00Z","attempt":1,"error":"boom one","trace":"t1"}'::jsonb,
			               '{"at":"2026-01-01T00:00:05Z","attempt":2,"error":"boom <two>","trace":"t2"}'::jsonb] WHERE id = $1`), id)
		require.NoError(t, err)
		res := get(t, bundle.http.URL, fmt.Sprintf("/api/jobs/%d", id))
		require.Equal(t, 200, res.status, res.body)
		var d JobDetail
		res.json(t, &d)
		require.Equal(t, "discarded", d.State)
		require.JSONEq(t, `{"n": 1}`, string(d.Args))
		require.Len(t, d.Attempts, 2)
		require.Equal(t, "boom <two>", d.Attempts[1].Error)
		require.Equal(t, []string{"retry", "delete"}, d.Actions)
		var events []string
		for _, e := range d.Timeline {
			events = append(events, e.Event)
		}
		require.Contains(t, events, "created")
		require.Contains(t, events, "attempt 1 failed")
		require.Contains(t, events, "discarded")

		page := get(t, bundle.http.URL, fmt.Sprintf("/jobs/%d", id))
		require.Equal(t, 200, page.status)
		require.Contains(t, page.body, "boom &lt;two&gt;", "errors are escaped")
	})
}
