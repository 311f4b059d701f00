package dashboard

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/tributary-run/tributary/scheduler"
)

// SchedulesPage lists every stored schedule.
type SchedulesPage struct {
	notEnabled
	Schedules []scheduler.Info `json:"schedules,omitempty"`
}

// Schedules reads the schedules page.
func (s *Server) Schedules(ctx context.Context) (*SchedulesPage, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.QueryTimeout)
	defer cancel()
	page := &SchedulesPage{notEnabled: notEnabled{Feature: "schedules", Enabled: true}}
	ok, err := s.tableExists(ctx, s.pool, "tributary_schedule")
	if err != nil {
		return nil, err
	}
	if !ok {
		page.Enabled = false
		page.Reason = "the schedule table is not in this schema (run `tributary migrate up` with a build that has the scheduler)"
		return page, nil
	}
	page.Schedules, err = scheduler.List(ctx, s.client)
	if err != nil {
		return nil, err
	}
	return page, nil
}

func (s *Server) handleSchedules(w http.ResponseWriter, r *http.Request) error {
	if _, err := pageQuery(r); err != nil {
		return err
	}
	page, err := s.Schedules(r.Context())
	if err != nil {
		return err
	}
	return s.render(w, r, "schedules", "Schedules", "schedules", page)
}

// scheduleActionResult is the JSON answer of a schedule action.
type scheduleActionResult struct {
	Action   string `json:"action"`
	Schedule string `json:"schedule"`
	// JobID is the job a trigger inserted.
	JobID int64 `json:"job_id,omitempty"`
}

// ScheduleAction triggers, pauses or resumes a schedule through the
// scheduler package.
func (s *Server) ScheduleAction(ctx context.Context, name, action string) (*scheduleActionResult, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.QueryTimeout)
	defer cancel()
	if ok, err := s.tableExists(ctx, s.pool, "tributary_schedule"); err != nil {
		return nil, err
	} else if !ok {
		return nil, notFoundf("schedules are not enabled in this schema")
	}
	res := &scheduleActionResult{Action: action, Schedule: name}
	var err error
	switch action {
	case "trigger":
		res.JobID, err = scheduler.Trigger(ctx, s.client, name, scheduler.TriggerOpts{FiredBy: "dashboard"})
	case "pause":
		err = scheduler.Pause(ctx, s.client, name)
	case "resume":
		err = scheduler.Resume(ctx, s.client, name)
	default:
		return nil, notFoundf("unknown schedule action %q: want trigger, pause or resume", action)
	}
	switch {
	case errors.Is(err, scheduler.ErrNotFound):
		return nil, notFoundf("schedule %q not found", name)
	case errors.Is(err, scheduler.ErrOrphaned), errors.Is(err, scheduler.ErrPreviousRunning):
		return nil, &httpError{status: http.StatusConflict, msg: err.Error()}
	case err != nil:
		return nil, fmt.Errorf("error running %s on schedule %q: %w", action, name, err)
	}
	return res, nil
}

func (s *Server) handleScheduleAction(w http.ResponseWriter, r *http.Request) error {
	name, action := r.PathValue("name"), r.PathValue("action")
	if err := checkText("schedule name", name); err != nil {
		return err
	}
	res, err := s.ScheduleAction(r.Context(), name, action)
	if err != nil {
		return err
	}
	s.logger.InfoContext(r.Context(), "dashboard schedule action", "action", action, "schedule", name, "job_id", res.JobID)
	if isAPI(r) {
		writeJSON(w, http.StatusOK, res)
		return nil
	}
	http.Redirect(w, r, "/schedules", http.StatusSeeOther)
	return nil
}
