package dashboard

import (
	"context"
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/limits"
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
