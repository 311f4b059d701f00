package dashboard

import (
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/jobs/workflow"
)

func TestWorkflowAttributeFilter(t *testing.T) {
	t.Parallel()
	b := setupWorkflows(t, Config{Token: testToken})
	failed := b.start(t, fanoutName, `{"width":2,"fail":1}`, &workflow.Opts{Attributes: map[string]string{"customer": "c-42", "region": "eu"}})
	done := b.start(t, chainName, `{"length":1}`, &workflow.Opts{Attributes: map[string]string{"customer": "c-42", "region": "us"}})
	other := b.start(t, chainName, `{"length":1}`, &workflow.Opts{Attributes: map[string]string{"customer": "c-7"}})
	b.waitStatus(t, failed, workflow.StatusFailed)
	b.waitStatus(t, done, workflow.StatusCompleted)
	b.waitStatus(t, other, workflow.StatusCompleted)

	res := get(t, b.base, "/api/workflows?attr="+url.QueryEscape("customer=c-42"))
	require.Equal(t, 200, res.status, res.body)
	var page WorkflowsPage
	res.json(t, &page)
	require.Len(t, page.Workflows, 2)
	require.Equal(t, done, page.Workflows[0].ID)
	require.EqualValues(t, 1, page.Counts["failed"].N, "the counts are the filter's")
	require.EqualValues(t, 1, page.Counts["completed"].N)
	require.Equal(t, []string{"customer=c-42"}, page.Filter.Attr)

	res = get(t, b.base, "/api/workflows?attr="+url.QueryEscape("customer=c-42")+"&attr="+url.QueryEscape("region=eu"))
	require.Equal(t, 200, res.status, res.body)
	page = WorkflowsPage{}
	res.json(t, &page)
	require.Len(t, page.Workflows, 1)
	require.Equal(t, failed, page.Workflows[0].ID)

	html := get(t, b.base, "/workflows?attr="+url.QueryEscape("customer=c-7")+"&attr=")
	require.Equal(t, 200, html.status, html.body)
	require.Contains(t, html.body, `href="/workflows/`+other+`"`)
	require.NotContains(t, html.body, `href="/workflows/`+done+`"`)
	require.Contains(t, html.body, `value="customer=c-7"`, "the filter field keeps the attribute")

	for _, q := range []string{"attr=customer", "attr=%3Dx", "attr=a%3D1&attr=a%3D2"} {
		res := get(t, b.base, "/api/workflows?"+q)
		require.Equal(t, 400, res.status, q)
	}
}
