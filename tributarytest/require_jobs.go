package tributarytest

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
)

// RequireEnqueuedOpts narrow what RequireEnqueued looks for; a zero field
// is not checked. A nil *RequireEnqueuedOpts checks the kind only.
type RequireEnqueuedOpts struct {
	// Schema holds River's tables. Defaults to the connection's current
	// schema: the test's schema on a DB's pool.
	Schema string
	// Queue, Priority, MaxAttempts and State are the job's.
	Queue       string
	Priority    int
	MaxAttempts int
	State       rivertype.JobState
	// Tags must all be among the job's tags.
	Tags []string
}

// listLimit bounds the rows an assertion reads and the rows a failure
// message shows.
const (
	listLimit = 1000
	showLimit = 10
)

// RequireEnqueuedTx requires that exactly one job of T's kind matching opts
// is visible in tx (so a job the transaction enqueued and has not committed
// counts) and returns it with its args decoded. Otherwise the test fails
// with what was found instead: the jobs of that kind that did not match,
// or the kinds there are.
//
//	job := tributarytest.RequireEnqueuedTx[SendReceiptArgs](ctx, t, tx, &tributarytest.RequireEnqueuedOpts{Queue: "email"})
//	require.Equal(t, "o-1", job.Args.OrderID)
func RequireEnqueuedTx[T river.JobArgs](ctx context.Context, tb testing.TB, tx pgx.Tx, opts *RequireEnqueuedOpts) *river.Job[T] {
	tb.Helper()
	job, err := requireEnqueued[T](ctx, tx, opts)
	if err != nil {
		tb.Fatalf("tributarytest: %v", err)
	}
	return job
}

// RequireEnqueued is RequireEnqueuedTx on what has been committed: it reads
// in a transaction of its own on pool.
func RequireEnqueued[T river.JobArgs](ctx context.Context, tb testing.TB, pool *pgxpool.Pool, opts *RequireEnqueuedOpts) *river.Job[T] {
	tb.Helper()
	var job *river.Job[T]
	err := readTx(ctx, pool, func(tx pgx.Tx) (err error) {
		job, err = requireEnqueued[T](ctx, tx, opts)
		return err
	})
	if err != nil {
		tb.Fatalf("tributarytest: %v", err)
	}
	return job
}

func requireEnqueued[T river.JobArgs](ctx context.Context, tx pgx.Tx, opts *RequireEnqueuedOpts) (*river.Job[T], error) {
	if opts == nil {
		opts = &RequireEnqueuedOpts{}
	}
	var zero T
	kind := zero.Kind()
	schema, err := schemaOf(ctx, tx, opts.Schema)
	if err != nil {
		return nil, err
	}
	ofKind, err := listJobs(ctx, tx, schema, river.NewJobListParams().Kinds(kind))
	if err != nil {
		return nil, err
	}
	if len(ofKind) == 0 {
		all, err := listJobs(ctx, tx, schema, river.NewJobListParams())
		if err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("no job of kind %q in schema %s; found instead %s", kind, schema, describeJobs(all))
	}
	var matched []*rivertype.JobRow
	for _, j := range ofKind {
		if opts.matches(j) {
			matched = append(matched, j)
		}
	}
	switch len(matched) {
	case 0:
		return nil, fmt.Errorf("no job of kind %q with %s in schema %s; found instead %s", kind, opts.describe(), schema, describeJobs(ofKind))
	case 1:
	default:
		return nil, fmt.Errorf("%d jobs of kind %q with %s in schema %s, want one (narrow the options): %s", len(matched), kind, opts.describe(), schema, describeJobs(matched))
	}
	var args T
	if err := json.Unmarshal(matched[0].EncodedArgs, &args); err != nil {
		return nil, fmt.Errorf("error decoding the args of job %d (kind %q): %w", matched[0].ID, kind, err)
	}
	return &river.Job[T]{JobRow: matched[0], Args: args}, nil
}

func (o *RequireEnqueuedOpts) matches(j *rivertype.JobRow) bool {
	return (o.Queue == "" || j.Queue == o.Queue) &&
		(o.Priority == 0 || j.Priority == o.Priority) &&
		(o.MaxAttempts == 0 || j.MaxAttempts == o.MaxAttempts) &&
		(o.State == "" || j.State == o.State) &&
		!slices.ContainsFunc(o.Tags, func(tag string) bool { return !slices.Contains(j.Tags, tag) })
}

// describe names the options that are set, as a failure message shows them.
func (o *RequireEnqueuedOpts) describe() string {
	var parts []string
	if o.Queue != "" {
		parts = append(parts, fmt.Sprintf("queue %q", o.Queue))
	}
	if o.Priority != 0 {
		parts = append(parts, fmt.Sprintf("priority %d", o.Priority))
	}
	if o.MaxAttempts != 0 {
		parts = append(parts, fmt.Sprintf("max attempts %d", o.MaxAttempts))
	}
	if o.State != "" {
		parts = append(parts, fmt.Sprintf("state %s", o.State))
	}
	if len(o.Tags) > 0 {
		parts = append(parts, fmt.Sprintf("tags %q", o.Tags))
	}
	if len(parts) == 0 {
		return "any options"
	}
	return strings.Join(parts, ", ")
}

// listJobs reads jobs through River's own listing (River owns its
// tables), oldest first.
func listJobs(ctx context.Context, tx pgx.Tx, schema string, params *river.JobListParams) ([]*rivertype.JobRow, error) {
	client, err := river.NewClient(riverpgxv5.New(nil), &river.Config{Schema: schema})
	if err != nil {
		return nil, fmt.Errorf("error making a River client to read jobs: %w", err)
	}
	res, err := client.JobListTx(ctx, tx, params.First(listLimit).OrderBy(river.JobListOrderByID, river.SortOrderAsc))
	if err != nil {
		return nil, fmt.Errorf("error listing jobs in schema %s: %w", schema, err)
	}
	return res.Jobs, nil
}

func describeJobs(jobs []*rivertype.JobRow) string {
	if len(jobs) == 0 {
		return "no jobs at all"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d job(s):", len(jobs))
	for i, j := range jobs {
		if i == showLimit {
			fmt.Fprintf(&b, "\n\t... and %d more", len(jobs)-showLimit)
			break
		}
		fmt.Fprintf(&b, "\n\tjob %d kind %q queue %q priority %d max attempts %d state %s tags %q args %s",
			j.ID, j.Kind, j.Queue, j.Priority, j.MaxAttempts, j.State, j.Tags, j.EncodedArgs)
	}
	return b.String()
}

// readTx runs fn in a read-only transaction on pool, rolled back after.
func readTx(ctx context.Context, pool *pgxpool.Pool, fn func(pgx.Tx) error) error {
	tx, err := pool.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
	if err != nil {
		return fmt.Errorf("error beginning a read transaction: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	return fn(tx)
}
