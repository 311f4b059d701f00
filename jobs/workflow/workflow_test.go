package workflow_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/jobs/workflow"
)

type noKindArgs struct{}

func (noKindArgs) Kind() string { return "" }

type badJSONArgs struct {
	C chan int `json:"c"`
}

func (badJSONArgs) Kind() string { return "wftest.bad" }

type uniqueArgs struct{}

func (uniqueArgs) Kind() string { return "wftest.unique" }
func (uniqueArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{UniqueOpts: river.UniqueOpts{ByArgs: true}}
}

func TestValidation(t *testing.T) {
	t.Parallel()
	step := func(name string) stepArgs { return stepArgs{Name: name} }
	deps := func(d ...string) *workflow.TaskOpts { return &workflow.TaskOpts{Deps: d} }

	cases := []struct {
		name  string
		build func() *workflow.Workflow
		kind  error
		msg   string
	}{
		{"EmptyWorkflow", func() *workflow.Workflow { return workflow.New("w", nil) },
			workflow.ErrEmptyWorkflow, `workflow "w" has no tasks`},
		{"EmptyName", func() *workflow.Workflow {
			wf := workflow.New("", nil)
			wf.Add("a", step("a"), nil)
			return wf
		}, workflow.ErrInvalidWorkflow, "workflow name is empty"},
		{"LongKey", func() *workflow.Workflow {
			wf := workflow.New("w", &workflow.Opts{ID: strings.Repeat("k", workflow.NameMaxLen+1)})
			wf.Add("a", step("a"), nil)
			return wf
		}, workflow.ErrInvalidWorkflow, "more than 200"},
		{"TooManyTasks", func() *workflow.Workflow {
			wf := workflow.New("w", nil)
			for i := range workflow.MaxTasks + 1 {
				wf.Add(fmt.Sprint("t", i), step("t"), nil)
			}
			return wf
		}, workflow.ErrTooManyTasks, `workflow "w" has 20001 tasks, more than the 20000 a workflow may have`},
		{"DuplicateTask", func() *workflow.Workflow {
			wf := workflow.New("w", nil)
			wf.Add("charge", step("a"), nil)
			wf.Add("charge", step("b"), nil)
			return wf
		}, workflow.ErrDuplicateTask, `workflow "w": task "charge" is added twice`},
		{"UnknownDependency", func() *workflow.Workflow {
			wf := workflow.New("w", nil)
			wf.Add("charge", step("a"), nil)
			wf.Add("ship", step("b"), deps("chrage"))
			return wf
		}, workflow.ErrUnknownDependency, `workflow "w": task "ship" depends on "chrage", which is not a task of this workflow`},
		{"UnknownRunIfTask", func() *workflow.Workflow {
			wf := workflow.New("w", nil)
			wf.Add("ship", step("a"), nil)
			wf.Add("refund", step("b"), &workflow.TaskOpts{RunIf: workflow.AnyFailed("shop")})
			return wf
		}, workflow.ErrUnknownDependency, `task "refund" has a RunIf condition on "shop"`},
		{"SelfDependency", func() *workflow.Workflow {
			wf := workflow.New("w", nil)
			wf.Add("a", step("a"), deps("a"))
			return wf
		}, workflow.ErrCycle, `task "a" is part of a cycle: "a" depends on "a"`},
		{"Cycle", func() *workflow.Workflow {
			wf := workflow.New("w", nil)
			wf.Add("root", step("r"), nil)
			wf.Add("a", step("a"), deps("root", "c"))
			wf.Add("b", step("b"), deps("a"))
			wf.Add("c", step("c"), deps("b"))
			return wf
		}, workflow.ErrCycle, `task "a" is part of a cycle: "a" depends on "c" depends on "b" depends on "a"`},
		{"DuplicateDependency", func() *workflow.Workflow {
			wf := workflow.New("w", nil)
			wf.Add("a", step("a"), nil)
			wf.Add("b", step("b"), deps("a", "a"))
			return wf
		}, workflow.ErrInvalidTask, `task "b" lists dependency "a" twice`},
		{"EmptyTaskName", func() *workflow.Workflow {
			wf := workflow.New("w", nil)
			wf.Add("", step("a"), nil)
			return wf
		}, workflow.ErrInvalidTask, "task name is empty"},
		{"NilArgs", func() *workflow.Workflow {
			wf := workflow.New("w", nil)
			wf.Add("a", nil, nil)
			return wf
		}, workflow.ErrInvalidTask, `task "a" has no job args`},
		{"EmptyKind", func() *workflow.Workflow {
			wf := workflow.New("w", nil)
			wf.Add("a", noKindArgs{}, nil)
			return wf
		}, workflow.ErrInvalidTask, "Kind() is empty"},
		{"ArgsNotJSON", func() *workflow.Workflow {
			wf := workflow.New("w", nil)
			wf.Add("a", badJSONArgs{}, nil)
			return wf
		}, workflow.ErrInvalidTask, `task "a" has args that do not encode to JSON`},
		{"BadPolicy", func() *workflow.Workflow {
			wf := workflow.New("w", nil)
			wf.Add("a", step("a"), &workflow.TaskOpts{OnDepFailure: "retry"})
			return wf
		}, workflow.ErrInvalidTask, `task "a" has invalid OnDepFailure "retry"`},
		{"EmptyRunIf", func() *workflow.Workflow {
			wf := workflow.New("w", nil)
			wf.Add("a", step("a"), &workflow.TaskOpts{RunIf: workflow.AnyFailed()})
			return wf
		}, workflow.ErrInvalidTask, "RunIf condition that names no task"},
		{"BadPriority", func() *workflow.Workflow {
			wf := workflow.New("w", nil)
			wf.Add("a", step("a"), &workflow.TaskOpts{InsertOpts: &river.InsertOpts{Priority: 9}})
			return wf
		}, workflow.ErrInvalidTask, `task "a" has invalid priority 9`},
		{"BadQueue", func() *workflow.Workflow {
			wf := workflow.New("w", nil)
			wf.Add("a", step("a"), &workflow.TaskOpts{InsertOpts: &river.InsertOpts{Queue: "Bad Queue"}})
			return wf
		}, workflow.ErrInvalidTask, `task "a" has invalid queue "Bad Queue"`},
		{"BadTag", func() *workflow.Workflow {
			wf := workflow.New("w", nil)
			wf.Add("a", step("a"), &workflow.TaskOpts{InsertOpts: &river.InsertOpts{Tags: []string{"t"}}})
			return wf
		}, workflow.ErrInvalidTask, `task "a" has invalid tag "t"`},
		{"UniqueOpts", func() *workflow.Workflow {
			wf := workflow.New("w", nil)
			wf.Add("a", step("a"), &workflow.TaskOpts{InsertOpts: &river.InsertOpts{UniqueOpts: river.UniqueOpts{ByArgs: true}}})
			return wf
		}, workflow.ErrInvalidTask, "UniqueOpts"},
		{"Pending", func() *workflow.Workflow {
			wf := workflow.New("w", nil)
			wf.Add("a", step("a"), &workflow.TaskOpts{InsertOpts: &river.InsertOpts{Pending: true}})
			return wf
		}, workflow.ErrInvalidTask, "Pending"},
		{"MetadataNotObject", func() *workflow.Workflow {
			wf := workflow.New("w", nil)
			wf.Add("a", step("a"), &workflow.TaskOpts{InsertOpts: &river.InsertOpts{Metadata: []byte(`[1]`)}})
			return wf
		}, workflow.ErrInvalidTask, "not a JSON object"},
		{"MetadataReservedKey", func() *workflow.Workflow {
			wf := workflow.New("w", nil)
			wf.Add("a", step("a"), &workflow.TaskOpts{InsertOpts: &river.InsertOpts{Metadata: []byte(`{"tributary_task":"x"}`)}})
			return wf
		}, workflow.ErrInvalidTask, `"tributary_task"`},
		{"ReservedTag", func() *workflow.Workflow {
			wf := workflow.New("w", nil)
			wf.Add("a", step("a"), &workflow.TaskOpts{InsertOpts: &river.InsertOpts{Tags: []string{"tributary_wf_x"}}})
			return wf
		}, workflow.ErrInvalidTask, `"tributary_wf_x"`},
	}
	db := pgtest.New(t)
	client := workflow.NewClient(db.Client(t))
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			wf := tc.build()
			err := wf.Validate()
			require.ErrorIs(t, err, tc.kind)
			require.ErrorContains(t, err, tc.msg)
			var ve *workflow.ValidationError
			require.True(t, errors.As(err, &ve))

			// InsertTx refuses it the same way, before anything is written,
			// and the caller's transaction is still usable.
			ctx := context.Background()
			tx, err := db.Pool.Begin(ctx)
			require.NoError(t, err)
			defer func() { _ = tx.Rollback(ctx) }()
			_, err = client.InsertTx(ctx, tx, wf)
			require.ErrorIs(t, err, tc.kind)
			var n int
			require.NoError(t, tx.QueryRow(ctx, db.Q(`SELECT (SELECT count(*) FROM /*schema*/tributary_workflow)
                + (SELECT count(*) FROM /*schema*/tributary_workflow_task) + (SELECT count(*) FROM /*schema*/river_job)`)).Scan(&n))
			require.Zero(t, n, "nothing written")
		})
	}

	t.Run("UniqueArgsRefusedAtInsert", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		db := pgtest.New(t)
		client := workflow.NewClient(db.Client(t))
		// The args' own InsertOpts() ask for uniqueness: only the insert can
		// tell when a duplicate exists, and it writes nothing then.
		_, err := db.Client(t).River().Insert(ctx, uniqueArgs{}, nil)
		require.NoError(t, err)
		wf := workflow.New("w", nil)
		wf.Add("a", uniqueArgs{}, nil)
		err = pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
			_, err := client.InsertTx(ctx, tx, wf)
			return err
		})
		require.ErrorIs(t, err, workflow.ErrInvalidTask)
		require.ErrorContains(t, err, `task "a" is a unique job`)
		require.Equal(t, 1, db.CountJobs(t), "only the job inserted before")
	})
}

func TestValidDefinitions(t *testing.T) {
	t.Parallel()
	// A long chain and a wide fan-out validate (the cycle search is not
	// recursive), and RunIf tasks become dependencies without being listed.
	chain := workflow.New("chain", nil)
	chain.Add("t0", stepArgs{Name: "t0"}, nil)
	for i := 1; i < workflow.MaxTasks; i++ {
		chain.Add(fmt.Sprint("t", i), stepArgs{Name: "t"}, &workflow.TaskOpts{Deps: []string{fmt.Sprint("t", i-1)}})
	}
	require.NoError(t, chain.Validate())

	wf := workflow.New("saga", nil)
	wf.Add("ship", stepArgs{Name: "ship"}, nil)
	wf.Add("refund", stepArgs{Name: "refund"}, &workflow.TaskOpts{Deps: []string{"ship"}, RunIf: workflow.AnyFailed("ship")})
	require.NoError(t, wf.Validate())
	require.Equal(t, []string{"ship", "refund"}, wf.TaskNames())
}
