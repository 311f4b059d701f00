package main

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
)

// oneSentence checks the CLI's error contract: one line on stderr.
func oneSentence(t *testing.T, stderr string) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	require.Len(t, lines, 1, "want one line on stderr, got %q", stderr)
	require.True(t, strings.HasPrefix(lines[0], "tributary: "), "stderr %q", stderr)
}

func TestCLIBadInput(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)

	cases := []struct {
		name    string
		env     []string
		args    []string
		mention string
	}{
		{"MalformedDatabaseURL", []string{"DATABASE_URL=postgres://user:pw@host:notaport/db"}, []string{"stats"}, "DATABASE_URL"},
		{"UnknownJobKind", nil, []string{"enqueue", "demo.nope", "{}"}, `"demo.nope"`},
		{"MalformedJSON", nil, []string{"enqueue", "demo.sleep", `{"ms":`}, "not valid JSON"},
		{"WrongArgType", nil, []string{"enqueue", "demo.sleep", `{"ms":"ten"}`}, "demo.sleep"},
		{"UnknownArgField", nil, []string{"enqueue", "demo.sleep", `{"msec":10}`}, "msec"},
		{"PriorityOutOfRange", nil, []string{"enqueue", "demo.noop", "{}", "--priority", "9"}, "priority 9"},
		{"UnknownState", nil, []string{"jobs", "list", "--state", "sleeping"}, `"sleeping"`},
		{"UnknownCommand", nil, []string{"frobnicate"}, `"frobnicate"`},
		{"UnknownSubcommand", nil, []string{"jobs", "frobnicate"}, `"frobnicate"`},
		{"UnknownFlag", nil, []string{"stats", "--frob"}, "--frob"},
		{"BadJobID", nil, []string{"jobs", "retry", "abc"}, `"abc"`},
		{"EmptyScheduleToPause", nil, []string{"schedules", "pause", ""}, "NAME must not be empty"},
		{"EmptyScheduleToResume", nil, []string{"schedules", "resume", ""}, "NAME must not be empty"},
		{"BlankScheduleToTrigger", nil, []string{"schedules", "trigger", "  "}, "NAME must not be empty"},
		{"EmptyKind", nil, []string{"enqueue", "", "{}", "--any-kind"}, "KIND must not be empty"},
		{"BlankKind", nil, []string{"enqueue", " ", "{}", "--any-kind"}, "KIND must not be empty"},
		{"KindWithSpace", nil, []string{"enqueue", "my kind", "{}", "--any-kind"}, `KIND "my kind" must not contain spaces`},
		{"NULInArgs", nil, []string{"enqueue", "my.kind", `{"s":"\u0000"}`, "--any-kind"}, `\u0000`},
		{"LoneSurrogateInArgs", nil, []string{"enqueue", "my.kind", `{"s":"\udc00"}`, "--any-kind"}, "surrogate"},
		{"DuplicateKeyAnyKind", nil, []string{"enqueue", "x.y", `{"a":1,"a":2}`, "--any-kind"}, `duplicate key "a"`},
		{"NestedDuplicateKeyAnyKind", nil, []string{"enqueue", "x.y", `{"o":{"b":1,"b":2}}`, "--any-kind"}, `duplicate key "b"`},
		{"DuplicateKeyKnownKind", nil, []string{"enqueue", "demo.sleep", `{"ms":1,"ms":2}`}, `duplicate key "ms"`},
		{"KeyByCaseOnlyKnownKind", nil, []string{"enqueue", "demo.sleep", `{"MS":1}`}, `key "MS" matches field "ms" only when case is ignored`},
		{"BadLogLevel", []string{"LOG_LEVEL=loud"}, []string{"stats"}, "LOG_LEVEL"},
		{"BadSchema", []string{"TRIBUTARY_SCHEMA=drop table"}, []string{"stats"}, "TRIBUTARY_SCHEMA"},
		{"BadQueues", nil, []string{"worker", "--queues", "default=zero"}, "default=zero"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res := cli(t, db, tc.env, tc.args...)
			require.Equal(t, exitUsage, res.code, "stderr: %s", res.stderr)
			oneSentence(t, res.stderr)
			require.Contains(t, res.stderr, tc.mention)
			require.Empty(t, res.stdout)
		})
	}
	// Nothing was written by any of them.
	require.Equal(t, 0, db.CountJobs(t))
}

func TestCLIUnreachableDatabase(t *testing.T) {
	t.Parallel()
	res := cli(t, nil, []string{"DATABASE_URL=postgres://alice:s3cretpw@127.0.0.1:1/app?sslmode=disable&connect_timeout=2"}, "stats")
	require.Equal(t, exitFailure, res.code, "stderr: %s", res.stderr)
	oneSentence(t, res.stderr)
	require.Contains(t, res.stderr, "127.0.0.1:1")
	require.NotContains(t, res.stderr, "s3cretpw")
}

func TestCLIMigrate(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	schema := "t_migrate_" + randomSuffix()
	t.Cleanup(func() {
		_, _ = pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
	})
	env := []string{"DATABASE_URL=" + pgtest.DatabaseURL(), "TRIBUTARY_SCHEMA=" + schema}

	t.Run("TwoProcessesAtOnce", func(t *testing.T) {
		var wg sync.WaitGroup
		results := make([]cliResult, 2)
		for i := range results {
			wg.Add(1)
			go func() {
				defer wg.Done()
				results[i] = cli(t, nil, env, "migrate", "up", "--json")
			}()
		}
		wg.Wait()
		var steps []int
		for _, res := range results {
			require.Equal(t, exitOK, res.code, "stderr: %s", res.stderr)
			var out struct {
				Steps []struct{ Line string } `json:"steps"`
			}
			require.NoError(t, json.Unmarshal([]byte(res.stdout), &out), res.stdout)
			steps = append(steps, len(out.Steps))
		}
		// One migrated everything, the other found nothing to do.
		require.ElementsMatch(t, []int{0, steps[0] + steps[1]}, steps)
		require.Positive(t, steps[0]+steps[1])
	})

	t.Run("StatusDownUp", func(t *testing.T) {
		res := cli(t, nil, env, "migrate", "status", "--json")
		require.Equal(t, exitOK, res.code, res.stderr)
		var st struct {
			Applied []struct{ Line string } `json:"applied"`
			Pending []struct{ Line string } `json:"pending"`
		}
		require.NoError(t, json.Unmarshal([]byte(res.stdout), &st))
		require.Empty(t, st.Pending)
		applied := len(st.Applied)

		res = cli(t, nil, env, "migrate", "down")
		require.Equal(t, exitOK, res.code, res.stderr)
		require.Contains(t, res.stdout, "roll back tributary")

		res = cli(t, nil, env, "migrate", "status", "--json")
		require.NoError(t, json.Unmarshal([]byte(res.stdout), &st))
		require.Len(t, st.Pending, 1)
		require.Equal(t, "tributary", st.Pending[0].Line)
		require.Len(t, st.Applied, applied-1)

		res = cli(t, nil, env, "migrate", "up")
		require.Equal(t, exitOK, res.code, res.stderr)
		res = cli(t, nil, env, "migrate", "up")
		require.Equal(t, exitOK, res.code, res.stderr)
		require.Contains(t, res.stdout, "nothing to migrate")
	})
}

func TestCLIJobs(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)

	res := cli(t, db, nil, "enqueue", "demo.sleep", `{"ms":5}`, "--queue", "slow", "--priority", "2", "--in", "1h", "--max-attempts", "3", "--json")
	require.Equal(t, exitOK, res.code, res.stderr)
	var enq struct {
		ID    int64  `json:"id"`
		State string `json:"state"`
	}
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &enq))
	require.Equal(t, "scheduled", enq.State)

	res = cli(t, db, nil, "enqueue", "demo.noop", "{}")
	require.Equal(t, exitOK, res.code, res.stderr)
	res = cli(t, db, nil, "enqueue", "my.own.kind", `{"x":1}`, "--any-kind")
	require.Equal(t, exitOK, res.code, res.stderr)

	res = cli(t, db, nil, "jobs", "list", "--state", "scheduled", "--json")
	require.Equal(t, exitOK, res.code, res.stderr)
	var list struct {
		Jobs []jobView `json:"jobs"`
	}
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &list))
	require.Len(t, list.Jobs, 1)
	job := list.Jobs[0]
	require.Equal(t, enq.ID, job.ID)
	require.Equal(t, "slow", job.Queue)
	require.Equal(t, 2, job.Priority)
	require.Equal(t, 3, job.MaxAttempts)
	require.JSONEq(t, `{"ms":5}`, string(job.Args))

	res = cli(t, db, nil, "stats", "--json")
	require.Equal(t, exitOK, res.code, res.stderr)
	var st struct {
		ByState map[string]int64 `json:"by_state"`
		Total   int64            `json:"total"`
	}
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &st))
	require.Equal(t, int64(3), st.Total)
	require.Equal(t, int64(2), st.ByState["available"])
	require.Equal(t, int64(1), st.ByState["scheduled"])

	id := strconv.FormatInt(enq.ID, 10)
	res = cli(t, db, nil, "jobs", "show", id)
	require.Equal(t, exitOK, res.code, res.stderr)
	require.Contains(t, res.stdout, "demo.sleep")

	res = cli(t, db, nil, "jobs", "cancel", id)
	require.Equal(t, exitOK, res.code, res.stderr)
	require.Contains(t, res.stdout, "cancelled")
	res = cli(t, db, nil, "jobs", "retry", id)
	require.Equal(t, exitOK, res.code, res.stderr)
	require.Contains(t, res.stdout, "state available")
	res = cli(t, db, nil, "jobs", "delete", id)
	require.Equal(t, exitOK, res.code, res.stderr)
	require.Equal(t, 2, db.CountJobs(t))

	res = cli(t, db, nil, "jobs", "show", "999999999")
	require.Equal(t, exitFailure, res.code)
	oneSentence(t, res.stderr)
	require.Contains(t, res.stderr, "999999999 not found")
}
