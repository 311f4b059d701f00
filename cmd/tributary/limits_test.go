package main

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/limits"
)

// TestCLILimits lists the limits a process declared, overrides one's max,
// resets it, and refuses unknown names and bad values.
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
	lim, err := limits.New(limits.Config{Schema: db.Schema, Limits: []limits.Limit{{Name: "per-customer", Kind: "sync", KeyArg: "customer_id", Max: 2}}})
	require.NoError(t, err)
	adm := lim.NewAdmitter(db.Client(t))
	require.NoError(t, adm.Start(ctx))
	require.NoError(t, adm.Stop(ctx))

	res = cli(t, db, nil, "limits", "set", "per-customer", "5")
	require.Equal(t, exitOK, res.code, res.stderr)
	require.Equal(t, "limit per-customer set to 5\n", res.stdout)
	res = cli(t, db, nil, "limits", "list", "--json")
	require.Equal(t, exitOK, res.code, res.stderr)
	var all []limits.Status
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &all))
	require.Len(t, all, 1)
	require.Equal(t, 5, all[0].Max)
	require.Equal(t, 2, all[0].DeclaredMax)
	require.Equal(t, "customer_id", all[0].KeyArg)
	res = cli(t, db, nil, "limits", "list")
	require.Equal(t, exitOK, res.code, res.stderr)
	require.Contains(t, res.stdout, "kind=sync queue=* per customer_id")
	require.Contains(t, res.stdout, "5 (set; declared 2)")

	res = cli(t, db, nil, "limits", "set", "per-customer", "--reset")
	require.Equal(t, exitOK, res.code, res.stderr)
	res = cli(t, db, nil, "limits", "list", "--json")
	var reset []limits.Status
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &reset))
	require.Equal(t, 2, reset[0].Max)
	require.Nil(t, reset[0].Override)

	res = cli(t, db, nil, "limits", "set", "nope", "1")
	require.Equal(t, exitFailure, res.code)
	require.Contains(t, res.stderr, `no limit named "nope"`)
	for _, args := range [][]string{{"per-customer", "-1"}, {"per-customer", "x"}, {"per-customer"}, {"bad name", "1"}} {
		res = cli(t, db, nil, append([]string{"limits", "set"}, args...)...)
		require.Equal(t, exitUsage, res.code, "%v: %s", args, res.stderr)
	}
}
