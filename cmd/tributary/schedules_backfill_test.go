package main

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/scheduler"
)

type backfillArgs struct{}

func (backfillArgs) Kind() string { return "cli.backfill" }

func TestCLISchedulesBackfill(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	s := scheduler.New(db.Client(t), scheduler.Config{})
	require.NoError(t, s.Add(scheduler.Schedule{Name: "minutely", Spec: "*/1 * * * *", Args: backfillArgs{}}))
	require.NoError(t, s.Start(ctx))
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	pgtest.WaitFor(t, 30*time.Second, "the schedule to be declared", func() (bool, error) {
		var n int
		err := db.Pool.QueryRow(ctx, db.Q(`SELECT count(*) FROM /*schema*/tributary_schedule WHERE name = 'minutely'`)).Scan(&n)
		return n == 1, err
	})
	from := time.Now().UTC().Add(-2 * time.Hour).Truncate(time.Hour)
	args := []string{"schedules", "backfill", "minutely", "--from", from.Format(time.RFC3339), "--to", from.Add(10 * time.Minute).Format(time.RFC3339)}
	res := cli(t, db, nil, args...)
	require.Equal(t, exitOK, res.code, res.stderr)
	require.Contains(t, res.stdout, "10 jobs inserted, 0 fire times had one")
	res = cli(t, db, nil, append(args, "--json")...)
	require.Equal(t, exitOK, res.code, res.stderr)
	var out scheduler.BackfillResult
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &out))
	require.Zero(t, out.Inserted, "again: nothing")
	require.Equal(t, 10, out.Existing)
	var jobs int
	require.NoError(t, db.Pool.QueryRow(ctx, db.Q(`SELECT count(*) FROM /*schema*/river_job WHERE kind = 'cli.backfill' AND metadata ->> 'tributary_fired_by' = 'backfill'`)).Scan(&jobs))
	require.Equal(t, 10, jobs)

	for _, bad := range [][]string{
		{"schedules", "backfill", "minutely", "--from", "yesterday", "--to", from.Format(time.RFC3339)},
		{"schedules", "backfill", "minutely", "--from", from.Format(time.RFC3339), "--to", from.Format(time.RFC3339)},
		{"schedules", "backfill", "minutely", "--from", from.Format(time.RFC3339), "--to", from.Add(1001 * time.Minute).Format(time.RFC3339)},
	} {
		res := cli(t, db, nil, bad...)
		require.Equal(t, exitUsage, res.code, "%v: %s", bad, res.stderr)
		oneSentence(t, res.stderr)
	}
	res = cli(t, db, nil, "schedules", "backfill", "nope", "--from", from.Format(time.RFC3339), "--to", from.Add(time.Minute).Format(time.RFC3339))
	require.Equal(t, exitFailure, res.code, res.stderr)
	require.Contains(t, res.stderr, `no schedule named "nope"`)
}
