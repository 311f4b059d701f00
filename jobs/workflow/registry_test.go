package workflow_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/jobs/workflow"
)

type orderInput struct {
	OrderID string `json:"order_id"`
	Items   int    `json:"items"`
}

// orderBuilder builds one task per item and a summary after them.
func orderBuilder(wf *workflow.Workflow, input json.RawMessage) error {
	var in orderInput
	if err := json.Unmarshal(input, &in); err != nil {
		return err
	}
	if in.OrderID == "" || in.Items < 1 {
		return errors.New(`want {"order_id": "...", "items": N} with N >= 1`)
	}
	var items []string
	for i := range in.Items {
		n := fmt.Sprint("item-", i)
		items = append(items, n)
		wf.Add(n, stepArgs{Name: n}, nil)
	}
	wf.Add("summary", stepArgs{Name: "summary", Read: items}, &workflow.TaskOpts{Deps: items})
	return nil
}

func TestRegistry(t *testing.T) {
	t.Parallel()
	reg := workflow.NewRegistry()
	require.NoError(t, reg.Register("order", orderBuilder))
	require.NoError(t, reg.Register("cyclic", func(wf *workflow.Workflow, _ json.RawMessage) error {
		wf.Add("a", stepArgs{Name: "a"}, &workflow.TaskOpts{Deps: []string{"a"}})
		return nil
	}))
	require.ErrorContains(t, reg.Register("order", orderBuilder), `workflow "order" is registered twice`)
	require.ErrorContains(t, reg.Register("", orderBuilder), "workflow name is empty")
	require.Equal(t, []string{"cyclic", "order"}, reg.Names())

	_, err := reg.Build("ordr", nil, nil)
	var unknown *workflow.UnknownWorkflowError
	require.ErrorAs(t, err, &unknown)
	require.EqualError(t, err, `unknown workflow "ordr": registered are [cyclic order]`)
	_, err = reg.Build("order", json.RawMessage(`{"order_id":`), nil)
	var inputErr *workflow.InputError
	require.ErrorAs(t, err, &inputErr)
	require.ErrorContains(t, err, `invalid input for workflow "order": not JSON`)
	_, err = reg.Build("order", json.RawMessage(`{"order_id":"o-1"}`), nil)
	require.EqualError(t, err, `invalid input for workflow "order": want {"order_id": "...", "items": N} with N >= 1`)
	_, err = reg.Build("cyclic", nil, nil)
	require.ErrorIs(t, err, workflow.ErrCycle)

	b := setup(t)
	ctx := context.Background()
	input := json.RawMessage(`{"order_id":"o-1","items":3}`)
	res, err := b.client.Start(ctx, reg, "order", input, &workflow.Opts{ID: "o-1"})
	require.NoError(t, err)
	d := b.waitStatus(t, res.ID, workflow.StatusCompleted)
	require.Equal(t, "order", d.Name)
	require.JSONEq(t, string(input), string(d.Input), "the input is kept on the workflow")
	require.Len(t, outputOf(t, taskByName(t, d, "summary")).Read, 3)
	_, err = b.client.Start(ctx, reg, "order", input, &workflow.Opts{ID: "o-1"})
	require.ErrorIs(t, err, workflow.ErrKeyConflict)
}

func TestList(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	client := workflow.NewClient(db.Client(t))
	ctx := context.Background()
	var ids []string
	for i := range 7 {
		name := "even"
		if i%2 == 1 {
			name = "odd"
		}
		res, err := client.Insert(ctx, diamond(name, nil))
		require.NoError(t, err)
		ids = append(ids, res.ID)
	}
	_, err := client.Cancel(ctx, ids[0])
	require.NoError(t, err)

	// Newest first, in pages.
	var got []string
	p := workflow.ListParams{Limit: 3}
	for {
		page, err := client.List(ctx, p)
		require.NoError(t, err)
		for _, s := range page.Workflows {
			got = append(got, s.ID)
		}
		if page.Next == "" {
			break
		}
		p.After = page.Next
	}
	want := append([]string(nil), ids...)
	for i, j := 0, len(want)-1; i < j; i, j = i+1, j-1 {
		want[i], want[j] = want[j], want[i]
	}
	require.Equal(t, want, got)

	page, err := client.List(ctx, workflow.ListParams{Name: "odd"})
	require.NoError(t, err)
	require.Len(t, page.Workflows, 3)
	for _, s := range page.Workflows {
		require.Equal(t, "odd", s.Name)
		require.Equal(t, workflow.Counts{Pending: 3, Active: 1}, s.Counts)
		require.Equal(t, 4, s.TaskCount)
	}
	page, err = client.List(ctx, workflow.ListParams{Statuses: []workflow.Status{workflow.StatusCancelled}})
	require.NoError(t, err)
	require.Len(t, page.Workflows, 1)
	require.Equal(t, ids[0], page.Workflows[0].ID)
	require.Equal(t, workflow.Counts{Cancelled: 4}, page.Workflows[0].Counts)

	sum, err := client.Summary(ctx, ids[0])
	require.NoError(t, err)
	require.Equal(t, page.Workflows[0], *sum)
	_, err = client.Summary(ctx, "nope")
	require.ErrorIs(t, err, workflow.ErrNotFound)

	_, err = client.List(ctx, workflow.ListParams{Statuses: []workflow.Status{"done"}})
	require.EqualError(t, err, `invalid workflow status "done": want one of [running completed failed cancelled]`)
	_, err = client.List(ctx, workflow.ListParams{Limit: 5000})
	require.ErrorContains(t, err, "invalid limit 5000")
	_, err = client.List(ctx, workflow.ListParams{After: "x"})
	require.ErrorContains(t, err, `invalid cursor "x"`)
	_, err = workflow.ParseRetryMode("failed-and-downstream")
	require.NoError(t, err)
}
