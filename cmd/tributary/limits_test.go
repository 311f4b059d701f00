package main

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/jobs/workflow"
	"github.com/tributary-run/tributary/limits"
	"github.com/tributary-run/tributary/queue"
)

// TestCLILimits lists the limits a process declared, overrides one's max,
// total and rate, resets them, and refuses unknown names and bad values,
// naming them.
func TestCLILimits(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()

	res := cli(t, db, nil, "limits", "list", "--json")
	require.Equal(t, exitOK, res.code, res.stderr)
	require.JSONEq(t, `[]`, res.stdout)
	res = cli(t, db, nil, "limits", "list")
	require.Equal(t, exitOK, res.code, res.stderr)
	require.Contains(t, res.stdout, "no limits declared")

	// A process declares its limits when its admitter starts.
	lim, err := limits.New(limits.Config{Schema: db.Schema, Limits: []limits.Limit{
		{Name: "per-customer", Kind: "sync", KeyArg: "customer_id", Max: 2},
		{Name: "mail-api", Kind: "mail", Rate: 100},
	}})
	require.NoError(t, err)
	adm := lim.NewAdmitter(db.Client(t))
	require.NoError(t, adm.Start(ctx))
	require.NoError(t, adm.Stop(ctx))

	res = cli(t, db, nil, "limits", "set", "per-customer", "5")
	require.Equal(t, exitOK, res.code, res.stderr)
	require.Equal(t, "limit per-customer set to max 5\n", res.stdout)
	res = cli(t, db, nil, "limits", "list", "--json")
	require.Equal(t, exitOK, res.code, res.stderr)
	var all []limits.Status
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &all))
	require.Len(t, all, 2)
	require.Equal(t, "per-customer", all[1].Name)
	require.Equal(t, 5, all[1].Max)
	require.Equal(t, 2, all[1].DeclaredMax)
	require.Equal(t, "customer_id", all[1].KeyArg)
	res = cli(t, db, nil, "limits", "list")
	require.Equal(t, exitOK, res.code, res.stderr)
	require.Contains(t, res.stdout, "kind=sync queue=* per customer_id")
	require.Contains(t, res.stdout, "5 (set; declared 2)")

	// A rate and its period, and a total.
	res = cli(t, db, nil, "limits", "set", "mail-api", "--rate", "20", "--period", "2s")
	require.Equal(t, exitOK, res.code, res.stderr)
	require.Equal(t, "limit mail-api set to rate 20, period 2s\n", res.stdout)
	res = cli(t, db, nil, "limits", "set", "per-customer", "--total", "7")
	require.Equal(t, exitOK, res.code, res.stderr)
	res = cli(t, db, nil, "limits", "list")
	require.Equal(t, exitOK, res.code, res.stderr)
	require.Contains(t, res.stdout, "20/2s (0 used) (set; declared 100/1s)")
	require.Contains(t, res.stdout, "7 over all keys round-robin (set; declared -)")
	res = cli(t, db, nil, "limits", "list", "--json")
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &all))
	require.Equal(t, 20, all[0].Rate)
	require.Equal(t, 100, all[0].DeclaredRate)
	require.Equal(t, 2*time.Second, all[0].Period)
	require.Equal(t, time.Second, all[0].DeclaredPeriod)
	require.Equal(t, 7, all[1].Total)
	require.Equal(t, 5, all[1].Max, "an override of the total leaves the max's")

	for _, name := range []string{"per-customer", "mail-api"} {
		res = cli(t, db, nil, "limits", "set", name, "--reset")
		require.Equal(t, exitOK, res.code, res.stderr)
		require.Equal(t, "limit "+name+" back to its declared values\n", res.stdout)
	}
	res = cli(t, db, nil, "limits", "list", "--json")
	var reset []limits.Status
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &reset))
	require.Equal(t, 100, reset[0].Rate)
	require.Equal(t, time.Second, reset[0].Period)
	require.Nil(t, reset[0].RateOverride)
	require.Nil(t, reset[0].PeriodOverride)
	require.Equal(t, 2, reset[1].Max)
	require.Zero(t, reset[1].Total)
	require.False(t, reset[1].Overridden())

	// A rate override needs a declared rate.
	res = cli(t, db, nil, "limits", "set", "per-customer", "--rate", "5")
	require.Equal(t, exitFailure, res.code)
	require.Contains(t, res.stderr, `limit "per-customer" declares no Rate`)
	res = cli(t, db, nil, "limits", "set", "nope", "--rate", "5")
	require.Equal(t, exitFailure, res.code)
	require.Contains(t, res.stderr, `no limit named "nope"`)
	for bad, want := range map[string]string{"--rate=-5": "--rate -5", "--total=0": "--total 0", "--period=0s": "--period 0s"} {
		res = cli(t, db, nil, "limits", "set", "mail-api", bad)
		require.Equal(t, exitUsage, res.code, "%s: %s", bad, res.stderr)
		require.Contains(t, res.stderr, want)
	}

	// A workflow concurrency key is a limit too: listed, its max set.
	wfc := workflow.NewClient(db.Client(t))
	for range 2 {
		wf := workflow.New("keyed", &workflow.Opts{ConcurrencyKey: "nightly", ConcurrencyLimit: 1})
		wf.Add("t", queue.RawArgs{KindName: "cli_test_keyed", JSON: []byte(`{}`)}, nil)
		_, err := wfc.Insert(ctx, wf)
		require.NoError(t, err)
	}
	res = cli(t, db, nil, "limits", "list")
	require.Equal(t, exitOK, res.code, res.stderr)
	require.Regexp(t, `workflow:nightly +workflows of concurrency key nightly +1 +- +1 +1 +1 +1 +workflow `, res.stdout)
	res = cli(t, db, nil, "limits", "set", "workflow:nightly", "2")
	require.Equal(t, exitOK, res.code, res.stderr)
	res = cli(t, db, nil, "limits", "list", "--json")
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &all))
	require.Equal(t, "workflow:nightly", all[2].Name)
	require.Equal(t, limits.HolderWorkflows, all[2].Holder)
	require.Equal(t, 2, all[2].Max)
	res = cli(t, db, nil, "limits", "set", "workflow:nightly", "--total", "3")
	require.Equal(t, exitFailure, res.code)
	require.Contains(t, res.stderr, "only its max can be overridden")

	res = cli(t, db, nil, "limits", "set", "nope", "1")
	require.Equal(t, exitFailure, res.code)
	require.Contains(t, res.stderr, `no limit named "nope"`)
	for _, args := range [][]string{{"per-customer", "-1"}, {"per-customer", "x"}, {"per-customer"}, {"bad name", "1"}, {"per-customer", "1", "--reset"}, {"per-customer", "--reset", "--rate", "3"}} {
		res = cli(t, db, nil, append([]string{"limits", "set"}, args...)...)
		require.Equal(t, exitUsage, res.code, "%v: %s", args, res.stderr)
	}
}
