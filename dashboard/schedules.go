package dashboard

import (
	"context"
	"fmt"
	"net/http"
	"time"
)

// ScheduleRow is one tributary_schedule row.
type ScheduleRow struct {
	Name         string     `json:"name"`
	Spec         string     `json:"spec"`
	Timezone     string     `json:"timezone"`
	Kind         string     `json:"kind"`
	NextRunAt    time.Time  `json:"next_run_at"`
	LastRunAt    *time.Time `json:"last_run_at,omitempty"`
	LastJobID    *int64     `json:"last_job_id,omitempty"`
	LastOutcome  string     `json:"last_outcome,omitempty"`
	FiredCount   int64      `json:"fired_count"`
	SkippedCount int64      `json:"skipped_count"`
	Paused       bool       `json:"paused"`
	Orphaned     bool       `json:"orphaned"`
}

// SchedulesPage lists every schedule.
type SchedulesPage struct {
	notEnabled
	Schedules []ScheduleRow `json:"schedules,omitempty"`
}

const schedulesSQL = `
SELECT name, spec, timezone, kind, next_run_at, last_run_at, last_job_id, coalesce(last_outcome, ''),
       fired_count, skipped_count, paused, orphaned_at IS NOT NULL
FROM /*schema*/tributary_schedule
ORDER BY name
LIMIT 1000`

// Schedules reads the schedules page.
func (s *Server) Schedules(ctx context.Context) (*SchedulesPage, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.QueryTimeout)
	defer cancel()
	page := &SchedulesPage{notEnabled: notEnabled{Feature: "schedules", Enabled: true}}
	ok, err := s.tableExists(ctx, "tributary_schedule")
	if err != nil {
		return nil, err
	}
	if !ok {
		page.Enabled = false
		page.Reason = "the schedule table is not in this schema (run `tributary migrate up` with a build that has the scheduler)"
		return page, nil
	}
	rows, err := s.pool.Query(ctx, s.q(schedulesSQL))
	if err != nil {
		return nil, fmt.Errorf("error listing schedules: %w", err)
	}
	defer rows.Close()
	page.Schedules = []ScheduleRow{}
	for rows.Next() {
		var r ScheduleRow
		if err := rows.Scan(&r.Name, &r.Spec, &r.Timezone, &r.Kind, &r.NextRunAt, &r.LastRunAt, &r.LastJobID, &r.LastOutcome,
			&r.FiredCount, &r.SkippedCount, &r.Paused, &r.Orphaned); err != nil {
			return nil, fmt.Errorf("error scanning schedules: %w", err)
		}
		page.Schedules = append(page.Schedules, r)
	}
	return page, rows.Err()
}

func (s *Server) handleSchedules(w http.ResponseWriter, r *http.Request) error {
	page, err := s.Schedules(r.Context())
	if err != nil {
		return err
	}
	return s.render(w, r, "schedules", "Schedules", "schedules", page)
}
