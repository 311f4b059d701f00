package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river/rivertype"

	"github.com/tributary-run/tributary/internal/riverjob"
	"github.com/tributary-run/tributary/jobs/events"
	"github.com/tributary-run/tributary/queue"
)

// JobFilter selects jobs for the jobs list. Zero fields do not filter.
type JobFilter struct {
	State string `json:"state,omitempty"`
	Kind  string `json:"kind,omitempty"`
	Queue string `json:"queue,omitempty"`
	// Before is the keyset cursor: only jobs with a smaller id.
	Before int64 `json:"before,omitempty"`
	// Limit is the page size. Defaults to 50, at most 500.
	Limit int `json:"limit"`
}

// maxNameLen is River's limit on kind and queue names (its check
// constraints allow fewer than 128 characters).
const maxNameLen = 127

// ParseJobFilter reads a filter from a query string. Unknown states, bad
// numbers, over-long names and names that are not text (invalid UTF-8, NUL
// or other control characters) are errors naming the value; other strings,
// SQL metacharacters included, are only ever passed as query parameters.
func ParseJobFilter(v url.Values) (JobFilter, error) {
	f := JobFilter{
		State: strings.TrimSpace(v.Get("state")),
		Kind:  strings.TrimSpace(v.Get("kind")),
		Queue: strings.TrimSpace(v.Get("queue")),
		Limit: PageSizeDefault,
	}
	if f.State != "" && !slices.Contains(queue.JobStates(), f.State) {
		return f, badRequestf("invalid state %q: want one of %s", f.State, strings.Join(queue.JobStates(), ", "))
	}
	for _, p := range []struct{ name, value string }{{"kind", f.Kind}, {"queue", f.Queue}} {
		if err := checkText(p.name, p.value); err != nil {
			return f, err
		}
	}
	if len(f.Kind) > maxNameLen {
		return f, badRequestf("invalid kind %q: longer than %d characters", truncateUTF8(f.Kind, 32)+"...", maxNameLen)
	}
	if len(f.Queue) > maxNameLen {
		return f, badRequestf("invalid queue %q: longer than %d characters", truncateUTF8(f.Queue, 32)+"...", maxNameLen)
	}
	if raw := strings.TrimSpace(v.Get("before")); raw != "" {
		n, err := strconv.ParseInt(raw, 10, 64)
		if err != nil || n < 1 {
			return f, badRequestf("invalid cursor before=%q: want a job id (a positive integer)", raw)
		}
		f.Before = n
	}
	if raw := strings.TrimSpace(v.Get("limit")); raw != "" {
		n, err := strconv.Atoi(raw)
		if err != nil || n < 1 || n > PageSizeMax {
			return f, badRequestf("invalid limit %q: want 1 to %d", raw, PageSizeMax)
		}
		f.Limit = n
	}
	return f, nil
}

// Query returns the filter as a query string, without the cursor.
func (f JobFilter) Query() url.Values {
	v := url.Values{}
	for k, val := range map[string]string{"state": f.State, "kind": f.Kind, "queue": f.Queue} {
		if val != "" {
			v.Set(k, val)
		}
	}
	if f.Limit != 0 && f.Limit != PageSizeDefault {
		v.Set("limit", strconv.Itoa(f.Limit))
	}
	return v
}

// JobSummary is one row of the jobs list.
type JobSummary struct {
	ID          int64      `json:"id"`
	Kind        string     `json:"kind"`
	Queue       string     `json:"queue"`
	State       string     `json:"state"`
	Priority    int        `json:"priority"`
	Attempt     int        `json:"attempt"`
	MaxAttempts int        `json:"max_attempts"`
	CreatedAt   time.Time  `json:"created_at"`
	ScheduledAt time.Time  `json:"scheduled_at"`
	AttemptedAt *time.Time `json:"attempted_at,omitempty"`
	FinalizedAt *time.Time `json:"finalized_at,omitempty"`
	// ArgsPreview is the start of the JSON arguments.
	ArgsPreview string `json:"args_preview"`
	ErrorCount  int    `json:"error_count"`
}

// JobPage is one page of the jobs list, newest first.
type JobPage struct {
	Filter JobFilter    `json:"filter"`
	Jobs   []JobSummary `json:"jobs"`
	// NextBefore is the cursor of the next page; 0 when this is the last.
	NextBefore int64 `json:"next_before,omitempty"`
	// Kinds lists known job kinds, for the filter form.
	Kinds []string `json:"kinds,omitempty"`
}

const argsPreviewLen = 120

// ListJobs returns one page of jobs matching f.
func (s *Server) ListJobs(ctx context.Context, f JobFilter) (*JobPage, error) {
	var page *JobPage
	err := s.readTx(ctx, func(tx pgx.Tx) error {
		var err error
		page, err = s.listJobs(ctx, tx, f)
		return err
	})
	return page, err
}

func (s *Server) listJobs(ctx context.Context, tx pgx.Tx, f JobFilter) (*JobPage, error) {
	if f.Limit == 0 {
		f.Limit = PageSizeDefault
	}
	var conds []string
	var args []any
	add := func(cond string, arg any) {
		args = append(args, arg)
		conds = append(conds, fmt.Sprintf(cond, len(args)))
	}
	if f.State != "" {
		add("state = $%d::"+riverjob.StateType, f.State)
	}
	if f.Kind != "" {
		add("kind = $%d", f.Kind)
	}
	if f.Queue != "" {
		add("queue = $%d", f.Queue)
	}
	if f.Before != 0 {
		add("id < $%d", f.Before)
	}
	sql := riverjob.JobListSQL
	if len(conds) > 0 {
		sql += "\nWHERE " + strings.Join(conds, " AND ")
	}
	args = append(args, f.Limit+1)
	sql += fmt.Sprintf("\nORDER BY id DESC\nLIMIT $%d", len(args))

	rows, err := tx.Query(ctx, s.q(sql), args...)
	if err != nil {
		return nil, fmt.Errorf("error listing jobs: %w", err)
	}
	defer rows.Close()
	page := &JobPage{Filter: f, Jobs: []JobSummary{}}
	for rows.Next() {
		var j JobSummary
		if err := rows.Scan(&j.ID, &j.Kind, &j.Queue, &j.State, &j.Priority, &j.Attempt, &j.MaxAttempts,
			&j.CreatedAt, &j.ScheduledAt, &j.AttemptedAt, &j.FinalizedAt, &j.ArgsPreview, &j.ErrorCount); err != nil {
			return nil, fmt.Errorf("error scanning jobs: %w", err)
		}
		if len(j.ArgsPreview) > argsPreviewLen {
			j.ArgsPreview = truncateUTF8(j.ArgsPreview, argsPreviewLen) + "…"
		}
		page.Jobs = append(page.Jobs, j)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("error listing jobs: %w", err)
	}
	if len(page.Jobs) > f.Limit {
		page.Jobs = page.Jobs[:f.Limit]
		page.NextBefore = page.Jobs[len(page.Jobs)-1].ID
	}
	return page, nil
}

// JobKinds lists up to 200 distinct job kinds.
func (s *Server) JobKinds(ctx context.Context) ([]string, error) {
	var kinds []string
	err := s.readTx(ctx, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, s.q(riverjob.JobKindsSQL))
		if err != nil {
			return fmt.Errorf("error listing job kinds: %w", err)
		}
		kinds, err = pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return fmt.Errorf("error listing job kinds: %w", err)
		}
		return nil
	})
	return kinds, err
}

// Attempt is one failed attempt of a job.
type Attempt struct {
	Attempt int       `json:"attempt"`
	At      time.Time `json:"at"`
	Error   string    `json:"error"`
	Trace   string    `json:"trace,omitempty"`
}

// TimelineEntry is one moment in a job's life.
type TimelineEntry struct {
	At    time.Time `json:"at"`
	Event string    `json:"event"`
	// Detail adds what happened (an error message, a state).
	Detail string `json:"detail,omitempty"`
}

// JobDetail is everything the dashboard shows about one job.
type JobDetail struct {
	JobSummary
	Args        json.RawMessage `json:"args"`
	Metadata    json.RawMessage `json:"metadata"`
	Tags        []string        `json:"tags"`
	AttemptedBy []string        `json:"attempted_by"`
	Attempts    []Attempt       `json:"attempts"`
	Timeline    []TimelineEntry `json:"timeline"`
	// Actions are the actions that apply to the job in its state.
	Actions []string `json:"actions"`
}

// ErrJobNotFound is returned for a job id that does not exist.
var ErrJobNotFound = errors.New("job not found")

// GetJob reads one job through River.
func (s *Server) GetJob(ctx context.Context, id int64) (*JobDetail, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.QueryTimeout)
	defer cancel()
	row, err := s.client.River().JobGet(ctx, id)
	if errors.Is(err, rivertype.ErrNotFound) {
		return nil, ErrJobNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("error reading job %d: %w", id, err)
	}
	return detailOf(row), nil
}

func detailOf(row *rivertype.JobRow) *JobDetail {
	d := &JobDetail{
		JobSummary: JobSummary{
			ID: row.ID, Kind: row.Kind, Queue: row.Queue, State: string(row.State), Priority: row.Priority,
			Attempt: row.Attempt, MaxAttempts: row.MaxAttempts, CreatedAt: row.CreatedAt,
			ScheduledAt: row.ScheduledAt, AttemptedAt: row.AttemptedAt, FinalizedAt: row.FinalizedAt,
			ErrorCount: len(row.Errors),
		},
		Args:        json.RawMessage(events.ReadableArgs(row.Kind, row.EncodedArgs)),
		Metadata:    json.RawMessage(row.Metadata),
		Tags:        row.Tags,
		AttemptedBy: row.AttemptedBy,
		Attempts:    []Attempt{},
	}
	if len(d.Args) == 0 {
		d.Args = json.RawMessage("{}")
	}
	if len(d.Metadata) == 0 {
		d.Metadata = json.RawMessage("{}")
	}
	if d.Tags == nil {
		d.Tags = []string{}
	}
	if d.AttemptedBy == nil {
		d.AttemptedBy = []string{}
	}
	d.Timeline = append(d.Timeline, TimelineEntry{At: row.CreatedAt, Event: "created", Detail: "queue " + row.Queue})
	if !row.ScheduledAt.Equal(row.CreatedAt) {
		d.Timeline = append(d.Timeline, TimelineEntry{At: row.ScheduledAt, Event: "scheduled", Detail: "runnable from here on (a delay, a retry backoff or a retry by hand)"})
	}
	for _, e := range row.Errors {
		d.Attempts = append(d.Attempts, Attempt{Attempt: e.Attempt, At: e.At, Error: e.Error, Trace: e.Trace})
		d.Timeline = append(d.Timeline, TimelineEntry{At: e.At, Event: fmt.Sprintf("attempt %d failed", e.Attempt), Detail: firstLine(e.Error)})
	}
	if row.AttemptedAt != nil {
		d.Timeline = append(d.Timeline, TimelineEntry{At: *row.AttemptedAt, Event: fmt.Sprintf("attempt %d started", row.Attempt)})
	}
	if row.FinalizedAt != nil {
		d.Timeline = append(d.Timeline, TimelineEntry{At: *row.FinalizedAt, Event: string(row.State)})
	}
	slices.SortStableFunc(d.Timeline, func(a, b TimelineEntry) int { return a.At.Compare(b.At) })
	d.Actions = actionsFor(d.State)
	return d
}

// actionsFor lists the job actions that make sense in a state; River
// refuses the rest (deleting a running job, retrying a running one).
func actionsFor(state string) []string {
	switch state {
	case "running":
		return []string{"cancel"}
	case "completed":
		return []string{"retry", "delete"}
	case "discarded", "cancelled":
		return []string{"retry", "delete"}
	default: // available, retryable, scheduled, pending
		return []string{"retry", "cancel", "delete"}
	}
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > 200 {
		s = truncateUTF8(s, 200) + "…"
	}
	return s
}

func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8Start(s[n]) {
		n--
	}
	return s[:n]
}

func utf8Start(b byte) bool { return b&0xC0 != 0x80 }
