package dashboard

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river/rivertype"

	"github.com/tributary-run/tributary/jobs/events"
	"github.com/tributary-run/tributary/queue"
)

// overviewView adds the throughput chart to the overview for the page.
type overviewView struct {
	*Overview
	Chart chart
}

func (s *Server) handleOverview(w http.ResponseWriter, r *http.Request) error {
	if _, err := pageQuery(r); err != nil {
		return err
	}
	ov, err := s.Overview(r.Context())
	if err != nil {
		return err
	}
	if isAPI(r) {
		return s.render(w, r, "", "", "", ov)
	}
	return s.render(w, r, "overview", "Overview", "overview", overviewView{Overview: ov, Chart: throughputChart(ov.Throughput)})
}

// jobsView adds links for the page.
type jobsView struct {
	*JobPage
	NextURL string
}

func (s *Server) handleJobs(w http.ResponseWriter, r *http.Request) error {
	q, err := pageQuery(r, "state", "kind", "queue", "before", "limit")
	if err != nil {
		return err
	}
	f, err := ParseJobFilter(q)
	if err != nil {
		return err
	}
	page, err := s.ListJobs(r.Context(), f)
	if err != nil {
		return err
	}
	if isAPI(r) {
		return s.render(w, r, "", "", "", page)
	}
	if page.Kinds, err = s.JobKinds(r.Context()); err != nil {
		return err
	}
	v := jobsView{JobPage: page}
	if page.NextBefore != 0 {
		q := f.Query()
		q.Set("before", strconv.FormatInt(page.NextBefore, 10))
		v.NextURL = "/jobs?" + q.Encode()
	}
	return s.render(w, r, "jobs", "Jobs", "jobs", v)
}

func parseJobID(raw string) (int64, error) {
	id, err := strconv.ParseInt(raw, 10, 64)
	if err != nil || id < 1 {
		return 0, badRequestf("invalid job id %q: want a positive integer", raw)
	}
	return id, nil
}

func (s *Server) handleJob(w http.ResponseWriter, r *http.Request) error {
	if _, err := pageQuery(r); err != nil {
		return err
	}
	id, err := parseJobID(r.PathValue("id"))
	if err != nil {
		return err
	}
	job, err := s.GetJob(r.Context(), id)
	if errors.Is(err, ErrJobNotFound) {
		return notFoundf("job %d not found", id)
	}
	if err != nil {
		return err
	}
	return s.render(w, r, "job", fmt.Sprintf("Job %d", id), "jobs", job)
}

// JobAction runs retry, cancel or delete on a job, keeping event lanes
// right (events.RetryJob, CancelJob, DeleteJob): cancelling or deleting a
// lane's head moves its lane on; a retry that would run an event ahead of
// its lane is refused with 409 naming the job it waits behind.
func (s *Server) JobAction(ctx context.Context, id int64, action string) (*JobDetail, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.QueryTimeout)
	defer cancel()
	var res *events.JobActionResult
	var err error
	switch action {
	case "retry":
		res, err = events.RetryJob(ctx, s.client, id)
	case "cancel":
		res, err = events.CancelJob(ctx, s.client, id)
	case "delete":
		res, err = events.DeleteJob(ctx, s.client, id)
	default:
		return nil, notFoundf("unknown job action %q: want retry, cancel or delete", action)
	}
	var order *events.LaneOrderError
	switch {
	case errors.Is(err, rivertype.ErrNotFound):
		return nil, notFoundf("job %d not found", id)
	case errors.Is(err, rivertype.ErrJobRunning):
		return nil, &httpError{status: http.StatusConflict, msg: fmt.Sprintf("job %d is running: cancel it first", id)}
	case errors.As(err, &order), errors.Is(err, events.ErrBlockingJobGone):
		return nil, &httpError{status: http.StatusConflict, msg: err.Error()}
	case err != nil:
		return nil, fmt.Errorf("error running %s on job %d: %w", action, id, err)
	}
	return detailOf(res.Job), nil
}

// jobActionResult is the JSON answer of a job action.
type jobActionResult struct {
	Action string     `json:"action"`
	Job    *JobDetail `json:"job"`
}

func (s *Server) handleJobAction(w http.ResponseWriter, r *http.Request) error {
	id, err := parseJobID(r.PathValue("id"))
	if err != nil {
		return err
	}
	action := r.PathValue("action")
	job, err := s.JobAction(r.Context(), id, action)
	if err != nil {
		return err
	}
	s.logger.InfoContext(r.Context(), "dashboard job action", "action", action, "job_id", id, "state", job.State)
	if isAPI(r) {
		writeJSON(w, http.StatusOK, jobActionResult{Action: action, Job: job})
		return nil
	}
	// The job's own id: a retry may put back a deleted lane job as a new one.
	target := "/jobs/" + strconv.FormatInt(job.ID, 10)
	if action == "delete" {
		target = "/jobs"
	}
	http.Redirect(w, r, target, http.StatusSeeOther)
	return nil
}

// chart is a stacked bar chart drawn as inline SVG by the template.
type chart struct {
	Width, Height int
	Bars          []chartBar
	Max           int64
	Labels        []chartLabel
}

type chartBar struct {
	X, W     float64
	Segments []chartSegment
	Title    string
}

type chartSegment struct {
	Y, H  float64
	Class string
}

type chartLabel struct {
	X    float64
	Text string
}

func throughputChart(points []ThroughputPoint) chart {
	c := chart{Width: 1100, Height: 150}
	for _, p := range points {
		c.Max = max(c.Max, p.Completed+p.Discarded+p.Cancelled)
	}
	scale := 0.0
	if c.Max > 0 {
		scale = float64(c.Height-20) / float64(c.Max)
	}
	n := max(1, len(points))
	slot := float64(c.Width) / float64(n)
	for i, p := range points {
		b := chartBar{X: float64(i)*slot + 2, W: slot - 4}
		y := float64(c.Height - 16)
		for _, seg := range []struct {
			n     int64
			class string
		}{{p.Completed, "completed"}, {p.Discarded, "discarded"}, {p.Cancelled, "cancelled"}} {
			h := float64(seg.n) * scale
			if h > 0 {
				y -= h
				b.Segments = append(b.Segments, chartSegment{Y: y, H: h, Class: seg.class})
			}
		}
		b.Title = fmt.Sprintf("%s: %s completed, %s discarded, %s cancelled", p.Minute.Format("15:04"), formatNum(p.Completed), formatNum(p.Discarded), formatNum(p.Cancelled))
		c.Bars = append(c.Bars, b)
		if i%3 == 0 || i == len(points)-1 {
			c.Labels = append(c.Labels, chartLabel{X: b.X + b.W/2, Text: p.Minute.Format("15:04")})
		}
	}
	return c
}

// notEnabled is the page body of a feature whose tables are missing.
type notEnabled struct {
	Feature string `json:"feature"`
	Enabled bool   `json:"enabled"`
	Reason  string `json:"reason"`
}

// tableExists guards reads of another feature's tables: a schema migrated
// before the feature existed shows "not enabled" instead of an error.
func (s *Server) tableExists(ctx context.Context, db queue.DBTX, table string) (bool, error) {
	var ok bool
	err := db.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", pgx.Identifier{s.schema, table}.Sanitize()).Scan(&ok)
	if err != nil {
		return false, fmt.Errorf("error looking up table %s: %w", table, err)
	}
	return ok, nil
}
