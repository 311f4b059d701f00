package riverjob_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/tributary-run/tributary/internal/pgtest"
	"github.com/tributary-run/tributary/internal/riverjob"
	"github.com/tributary-run/tributary/queue"
)

// fixtureArgs are the args of the jobs the statement tests insert; the
// dispatch-shaped fields let the lane statements find them.
type fixtureArgs struct {
	KindName    string `json:"-"`
	N           int    `json:"n,omitempty"`
	Consumer    string `json:"consumer,omitempty"`
	AggregateID string `json:"aggregate_id,omitempty"`
	Seq         int64  `json:"seq,omitempty"`
}

func (a fixtureArgs) Kind() string {
	if a.KindName == "" {
		return "riverjob.fixture"
	}
	return a.KindName
}

// fixture is a migrated schema (River's migrations at the pinned version,
// then tributary's) and a client on it.
type fixture struct {
	db     *pgtest.DB
	client *queue.Client
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	db := pgtest.New(t)
	return &fixture{db: db, client: db.Client(t)}
}

// insert inserts a job through River and returns its row.
func (f *fixture) insert(t *testing.T, args fixtureArgs, opts *river.InsertOpts) *rivertype.JobRow {
	t.Helper()
	res, err := f.client.River().Insert(context.Background(), args, opts)
	require.NoError(t, err)
	return res.Job
}

// job reads a job back through River's API.
func (f *fixture) job(t *testing.T, id int64) *rivertype.JobRow {
	t.Helper()
	job, err := f.client.River().JobGet(context.Background(), id)
	require.NoError(t, err)
	return job
}

// start puts a job in the state a producer's fetch leaves it in (running,
// attempt counted, attempted by a client id).
func (f *fixture) start(t *testing.T, id int64, by string) {
	t.Helper()
	_, err := f.db.Pool.Exec(context.Background(), f.db.Q(`UPDATE /*schema*/river_job
        SET state = 'running', attempt = attempt + 1, attempted_at = now(), attempted_by = array_append(attempted_by, $2)
        WHERE id = $1`), id, by)
	require.NoError(t, err)
}

// finalize puts a job in a finalized state as River's completer would.
func (f *fixture) finalize(t *testing.T, id int64, state rivertype.JobState) {
	t.Helper()
	_, err := f.db.Pool.Exec(context.Background(), f.db.Q(`UPDATE /*schema*/river_job
        SET state = $2::text::/*schema*/river_job_state, finalized_at = now() WHERE id = $1`), id, string(state))
	require.NoError(t, err)
}

// retriedByRiver checks that River's own retry takes a job back, as it
// does the jobs it finalized itself.
func (f *fixture) retriedByRiver(t *testing.T, id int64) {
	t.Helper()
	job, err := f.client.River().JobRetry(context.Background(), id)
	require.NoError(t, err)
	require.Equal(t, rivertype.JobStateAvailable, job.State)
}

// explain returns the plan of the named statement (riverjob.Statements) for
// args.
func (f *fixture) explain(t *testing.T, name string, args ...any) string {
	t.Helper()
	stmt, ok := riverjob.Statements()[name]
	require.True(t, ok, name)
	rows, err := f.db.Pool.Query(context.Background(), "EXPLAIN (COSTS OFF) "+f.db.Q(stmt), args...)
	require.NoError(t, err)
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return strings.Join(lines, "\n")
}

// metadata decodes a job's metadata.
func metadata(t *testing.T, job *rivertype.JobRow) map[string]any {
	t.Helper()
	m := map[string]any{}
	require.NoError(t, json.Unmarshal(job.Metadata, &m))
	return m
}
