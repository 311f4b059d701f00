package dashboard

import (
	"context"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/jobs/workflow"
	"github.com/tributary-run/tributary/limits"
	"github.com/tributary-run/tributary/queue"
)

// TestLimitsPageAndMax: the page lists what a process declared, and an
// authorised POST overrides a limit's max and drops the override.
func TestLimitsPageAndMax(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, bundle := setupServer(t, Config{Token: testToken})
	auth := []string{"Authorization", "Bearer " + testToken}

	var page LimitsPage
	get(t, bundle.http.URL, "/api/limits").json(t, &page)
	require.True(t, page.Enabled)
	require.Empty(t, page.Limits)

	lim, err := limits.New(limits.Config{Schema: bundle.db.Schema, Limits: []limits.Limit{{Name: "per-customer", Kind: "sync", KeyArg: "customer_id", Max: 2}}})
	require.NoError(t, err)
	adm := lim.NewAdmitter(bundle.client)
	require.NoError(t, adm.Start(ctx))
	require.NoError(t, adm.Stop(ctx))

	res := get(t, bundle.http.URL, "/api/limits")
	require.Equal(t, http.StatusOK, res.status, res.body)
	res.json(t, &page)
	require.Len(t, page.Limits, 1)
	require.Equal(t, 2, page.Limits[0].Max)
	html := get(t, bundle.http.URL, "/limits")
	require.Equal(t, http.StatusOK, html.status)
	require.Contains(t, html.body, "per-customer")
	require.Contains(t, html.body, "per customer_id")

	require.Equal(t, http.StatusUnauthorized, post(t, bundle.http.URL, "/api/limits/per-customer/max", url.Values{"max": {"5"}}).status)
	res = post(t, bundle.http.URL, "/api/limits/per-customer/max", url.Values{"max": {"5"}}, auth...)
	require.Equal(t, http.StatusOK, res.status, res.body)
	require.JSONEq(t, `{"limit":"per-customer","max":5}`, res.body)
	var after LimitsPage
	get(t, bundle.http.URL, "/api/limits").json(t, &after)
	require.Equal(t, 5, after.Limits[0].Max)

	res = post(t, bundle.http.URL, "/api/limits/per-customer/max", url.Values{"max": {""}}, auth...)
	require.Equal(t, http.StatusOK, res.status, res.body)
	var reset LimitsPage
	get(t, bundle.http.URL, "/api/limits").json(t, &reset)
	require.Equal(t, 2, reset.Limits[0].Max)
	require.Nil(t, reset.Limits[0].Override)

	require.Equal(t, http.StatusNotFound, post(t, bundle.http.URL, "/api/limits/nope/max", url.Values{"max": {"1"}}, auth...).status)
	res = post(t, bundle.http.URL, "/api/limits/per-customer/max", url.Values{"max": {"-1"}}, auth...)
	require.Equal(t, http.StatusBadRequest, res.status)
	require.Contains(t, res.body, `invalid max \"-1\"`)
}

// TestLimitOverride: an authorised POST overrides a limit's total, rate
// and period, the page and /api/limits show them beside the declared
// values, a reset drops them all, and bad values are refused by name.
func TestLimitOverride(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, bundle := setupServer(t, Config{Token: testToken})
	auth := []string{"Authorization", "Bearer " + testToken}
	lim, err := limits.New(limits.Config{Schema: bundle.db.Schema, Limits: []limits.Limit{
		{Name: "mail-api", Kind: "mail", Rate: 100},
		{Name: "per-customer", Kind: "sync", KeyArg: "customer_id", Max: 2},
	}})
	require.NoError(t, err)
	adm := lim.NewAdmitter(bundle.client)
	require.NoError(t, adm.Start(ctx))
	require.NoError(t, adm.Stop(ctx))

	require.Equal(t, http.StatusUnauthorized, post(t, bundle.http.URL, "/api/limits/mail-api/override", url.Values{"rate": {"20"}}).status)
	res := post(t, bundle.http.URL, "/api/limits/mail-api/override", url.Values{"rate": {"20"}, "period": {"2s"}, "total": {"3"}}, auth...)
	require.Equal(t, http.StatusOK, res.status, res.body)
	require.JSONEq(t, `{"limit":"mail-api","rate":20,"period":"2s","total":3}`, res.body)
	var page LimitsPage
	get(t, bundle.http.URL, "/api/limits").json(t, &page)
	require.Equal(t, "mail-api", page.Limits[0].Name)
	require.Equal(t, 20, page.Limits[0].Rate)
	require.Equal(t, 100, page.Limits[0].DeclaredRate)
	require.Equal(t, 2*time.Second, page.Limits[0].Period)
	require.Equal(t, 3, page.Limits[0].Total)
	html := get(t, bundle.http.URL, "/limits")
	require.Contains(t, html.body, "20/2s")
	require.Contains(t, html.body, "(set; declared 100/1s)")

	res = post(t, bundle.http.URL, "/api/limits/mail-api/override", url.Values{"reset": {"1"}}, auth...)
	require.Equal(t, http.StatusOK, res.status, res.body)
	var reset LimitsPage
	get(t, bundle.http.URL, "/api/limits").json(t, &reset)
	require.Equal(t, 100, reset.Limits[0].Rate)
	require.Equal(t, time.Second, reset.Limits[0].Period)
	require.Zero(t, reset.Limits[0].Total)
	require.False(t, reset.Limits[0].Overridden())

	for _, c := range []struct {
		name   string
		form   url.Values
		status int
		want   string
	}{
		{"mail-api", url.Values{"rate": {"-5"}}, http.StatusBadRequest, `invalid rate \"-5\"`},
		{"mail-api", url.Values{"total": {"0"}}, http.StatusBadRequest, `invalid total \"0\"`},
		{"mail-api", url.Values{"period": {"soon"}}, http.StatusBadRequest, `invalid period \"soon\"`},
		{"mail-api", url.Values{}, http.StatusBadRequest, `nothing to set`},
		{"per-customer", url.Values{"rate": {"5"}}, http.StatusBadRequest, `declares no Rate`},
		{"nope", url.Values{"rate": {"5"}}, http.StatusNotFound, `limit \"nope\" not found`},
	} {
		res := post(t, bundle.http.URL, "/api/limits/"+c.name+"/override", c.form, auth...)
		require.Equal(t, c.status, res.status, "%s %v: %s", c.name, c.form, res.body)
		require.Contains(t, res.body, c.want)
	}
}

// TestLimitsPageWorkflowKey: a workflow concurrency key is listed as the
// limit "workflow:KEY" with its admitted and queued workflows, the oldest
// queued one linked; its max is overridden by the same form, its total
// refused.
func TestLimitsPageWorkflowKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, bundle := setupServer(t, Config{Token: testToken})
	auth := []string{"Authorization", "Bearer " + testToken}
	wfc := workflow.NewClient(bundle.client)
	var ids []string
	for range 2 {
		wf := workflow.New("keyed", &workflow.Opts{ConcurrencyKey: "customer 7", ConcurrencyLimit: 1})
		wf.Add("t", queue.RawArgs{KindName: "dashboard_test_keyed", JSON: []byte(`{}`)}, nil)
		res, err := wfc.Insert(ctx, wf)
		require.NoError(t, err)
		ids = append(ids, res.ID)
	}

	var page LimitsPage
	get(t, bundle.http.URL, "/api/limits").json(t, &page)
	require.Len(t, page.Limits, 1)
	st := page.Limits[0]
	require.Equal(t, "workflow:customer 7", st.Name)
	require.Equal(t, limits.HolderWorkflows, st.Holder)
	require.Equal(t, 1, st.Max)
	require.Equal(t, 1, st.Used)
	require.Equal(t, 1, st.Waiting)
	require.Equal(t, ids[1], st.OldestWaitingWorkflowID)
	html := get(t, bundle.http.URL, "/limits")
	require.Contains(t, html.body, "workflows of its concurrency key")
	require.Contains(t, html.body, `href="/workflows/`+ids[1]+`"`)

	res := post(t, bundle.http.URL, "/api/limits/"+url.PathEscape("workflow:customer 7")+"/max", url.Values{"max": {"2"}}, auth...)
	require.Equal(t, http.StatusOK, res.status, res.body)
	var after LimitsPage
	get(t, bundle.http.URL, "/api/limits").json(t, &after)
	require.Equal(t, 2, after.Limits[0].Max)
	require.Equal(t, 1, after.Limits[0].DeclaredMax)
	res = post(t, bundle.http.URL, "/api/limits/"+url.PathEscape("workflow:customer 7")+"/override", url.Values{"total": {"2"}}, auth...)
	require.Equal(t, http.StatusBadRequest, res.status, res.body)
	require.Contains(t, res.body, "only its max can be overridden")
}
