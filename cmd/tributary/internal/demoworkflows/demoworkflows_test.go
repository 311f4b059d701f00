package demoworkflows_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/cmd/tributary/internal/demoworkflows"
	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/jobs/workflow"
	"github.com/tributary-run/tributary/queue"
)

func TestBuildRefusesBadInput(t *testing.T) {
	t.Parallel()
	reg, err := demoworkflows.NewRegistry()
	require.NoError(t, err)
	cases := []struct {
		name, workflow, input, mention string
	}{
		{"NoInput", demoworkflows.FanoutName, ``, `want {"width":N,"fail":K}`},
		{"NullInput", demoworkflows.ChainName, `null`, `want {"length":N}`},
		{"ZeroWidth", demoworkflows.FanoutName, `{"width":0}`, "invalid width 0"},
		{"WidthTooLarge", demoworkflows.FanoutName, fmt.Sprintf(`{"width":%d}`, workflow.MaxTasks-1), fmt.Sprintf("invalid width %d", workflow.MaxTasks-1)},
		{"NegativeFail", demoworkflows.FanoutName, `{"width":3,"fail":-1}`, "invalid fail -1"},
		{"FailAboveWidth", demoworkflows.FanoutName, `{"width":3,"fail":4}`, "invalid fail 4"},
		{"UnknownField", demoworkflows.FanoutName, `{"width":3,"fial":1}`, `"fial"`},
		{"RepeatedField", demoworkflows.FanoutName, `{"width":3,"width":4}`, `"width"`},
		{"WrongType", demoworkflows.ChainName, `{"length":"ten"}`, "length"},
		{"ZeroLength", demoworkflows.ChainName, `{"length":0}`, "invalid length 0"},
		{"LengthTooLarge", demoworkflows.ChainName, fmt.Sprintf(`{"length":%d}`, workflow.MaxTasks+1), fmt.Sprintf("invalid length %d", workflow.MaxTasks+1)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := reg.Build(tc.workflow, json.RawMessage(tc.input), nil)
			var ie *workflow.InputError
			require.ErrorAs(t, err, &ie)
			require.ErrorContains(t, err, tc.mention)
		})
	}
	_, err = reg.Build("demo.nope", json.RawMessage(`{}`), nil)
	var ue *workflow.UnknownWorkflowError
	require.ErrorAs(t, err, &ue)

	wf, err := reg.Build(demoworkflows.FanoutName, json.RawMessage(`{"width":3,"fail":3}`), nil)
	require.NoError(t, err)
	require.Equal(t, []string{"split", "part-1", "part-2", "part-3", "sum"}, wf.TaskNames())
	wf, err = reg.Build(demoworkflows.ChainName, json.RawMessage(`{"length":3}`), nil)
	require.NoError(t, err)
	require.Equal(t, []string{"link-1", "link-2", "link-3"}, wf.TaskNames())
}

func TestDemoWorkflowsRun(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	coord, err := workflow.NewCoordinator(db.Pool, workflow.CoordinatorConfig{Schema: db.Schema, Logger: pgtest.Logger(t)})
	require.NoError(t, err)
	rt := pgtest.StartRuntime(t, db, queue.RuntimeConfig{Middleware: []rivertype.Middleware{coord.Middleware()}}, func(rt *queue.Runtime) {
		demoworkflows.Register(rt)
		require.NoError(t, coord.Register(rt))
	})
	wfc := workflow.NewClient(rt.Client)
	reg, err := demoworkflows.NewRegistry()
	require.NoError(t, err)
	ctx := context.Background()
	wait := func(id string, status workflow.Status) *workflow.Details {
		var d *workflow.Details
		pgtest.WaitFor(t, 30*time.Second, "workflow "+id+" to be "+string(status), func() (bool, error) {
			var err error
			d, err = wfc.Get(ctx, id)
			return err == nil && d.Status == status, err
		})
		return d
	}
	task := func(d *workflow.Details, name string) workflow.TaskInfo {
		for _, task := range d.Tasks {
			if task.Name == name {
				return task
			}
		}
		t.Fatalf("no task %q", name)
		return workflow.TaskInfo{}
	}

	for _, in := range []demoworkflows.FanoutInput{{Width: 6, Fail: 0}, {Width: 6, Fail: 2}, {Width: 2, Fail: 2}} {
		raw, err := json.Marshal(in)
		require.NoError(t, err)
		res, err := wfc.Start(ctx, reg, demoworkflows.FanoutName, raw, nil)
		require.NoError(t, err)
		want := workflow.StatusCompleted
		if in.Fail > 0 {
			want = workflow.StatusFailed
		}
		d := wait(res.ID, want)
		require.Equal(t, in.Fail, d.Counts.Failed, "%+v", in)
		sum := task(d, "sum")
		require.Equal(t, workflow.TaskCompleted, sum.State, "the fan-in runs even when parts failed")
		var out demoworkflows.SumOutput
		require.NoError(t, json.Unmarshal(sum.Output, &out))
		require.Equal(t, demoworkflows.ExpectedSum(in), out.Sum, "%+v", in)
		require.Equal(t, in.Width-in.Fail, out.Parts)
		require.Len(t, out.Missing, in.Fail)
	}

	res, err := wfc.Start(ctx, reg, demoworkflows.ChainName, json.RawMessage(`{"length":12}`), nil)
	require.NoError(t, err)
	d := wait(res.ID, workflow.StatusCompleted)
	require.Equal(t, workflow.Counts{Completed: 12}, d.Counts)
	require.JSONEq(t, `12`, string(task(d, "link-12").Output))
}
