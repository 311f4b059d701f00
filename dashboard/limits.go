package dashboard

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tributary-run/tributary/limits"
)

// LimitsPage is the limits page: every declared limit with its use, what
// waits behind it and the oldest waiting job (limits.List).
type LimitsPage struct {
	notEnabled
	Limits []limits.Status `json:"limits"`
}

// Limits reads the limits page.
func (s *Server) Limits(ctx context.Context) (*LimitsPage, error) {
	page := &LimitsPage{notEnabled: notEnabled{Feature: "limits", Enabled: true}, Limits: []limits.Status{}}
	err := s.readTx(ctx, func(tx pgx.Tx) error {
		ok, err := s.tableExists(ctx, tx, "tributary_limit")
		if err != nil {
			return err
		}
		if !ok {
			page.Enabled = false
			page.Reason = "the limits table is not in this schema (run `tributary migrate up` with a build that has limits)"
			return nil
		}
		all, err := limits.List(ctx, tx, s.schema)
		if all != nil {
			page.Limits = all
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return page, nil
}

func (s *Server) handleLimits(w http.ResponseWriter, r *http.Request) error {
	if _, err := pageQuery(r); err != nil {
		return err
	}
	page, err := s.Limits(r.Context())
	if err != nil {
		return fmt.Errorf("error reading limits: %w", err)
	}
	return s.render(w, r, "limits", "Limits", "limits", page)
}

// limitMaxResult is what POST /api/limits/{name}/max answers.
type limitMaxResult struct {
	Limit string `json:"limit"`
	Max   *int   `json:"max"` // nil: the override was dropped
}

// handleLimitMax overrides a limit's max for every process (form field
// "max", 0 pauses) or, with "max" empty, drops the override.
func (s *Server) handleLimitMax(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("name")
	if err := limits.ValidateName(name); err != nil {
		return badRequestf("%v", err)
	}
	raw := strings.TrimSpace(r.FormValue("max"))
	res := limitMaxResult{Limit: name}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.QueryTimeout)
	defer cancel()
	var err error
	if raw == "" {
		err = limits.ResetMax(ctx, s.pool, s.schema, name)
	} else {
		n, perr := strconv.Atoi(raw)
		if perr != nil || n < 0 {
			return badRequestf("invalid max %q: want a whole number, 0 or more, or nothing to reset", raw)
		}
		res.Max = &n
		err = limits.SetMax(ctx, s.pool, s.schema, name, n)
	}
	if errors.Is(err, limits.ErrUnknownLimit) {
		return notFoundf("limit %q not found", name)
	}
	if err != nil {
		return err
	}
	s.logger.InfoContext(r.Context(), "dashboard limit max", "limit", name, "max", raw)
	if isAPI(r) {
		writeJSON(w, http.StatusOK, res)
		return nil
	}
	http.Redirect(w, r, "/limits", http.StatusSeeOther)
	return nil
}

// limitOverrideResult is what POST /api/limits/{name}/override answers: the
// overrides it set, or Reset when it dropped them all.
type limitOverrideResult struct {
	Limit  string  `json:"limit"`
	Max    *int    `json:"max,omitempty"`
	Total  *int    `json:"total,omitempty"`
	Rate   *int    `json:"rate,omitempty"`
	Period *string `json:"period,omitempty"`
	Reset  bool    `json:"reset,omitempty"`
}

// handleLimitOverride overrides a limit's values for every process (form
// fields "max", "total", "rate" and "period", such as "1s"; an empty one
// stays as it is) or, with "reset" set, drops every override.
func (s *Server) handleLimitOverride(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("name")
	if err := limits.ValidateName(name); err != nil {
		return badRequestf("%v", err)
	}
	res := limitOverrideResult{Limit: name, Reset: r.FormValue("reset") != ""}
	var o limits.Override
	whole := func(field string, least int) (*int, error) {
		raw := strings.TrimSpace(r.FormValue(field))
		if raw == "" {
			return nil, nil
		}
		n, err := strconv.Atoi(raw)
		if err != nil || n < least {
			return nil, badRequestf("invalid %s %q: want a whole number, %d or more, or nothing to leave it", field, raw, least)
		}
		return &n, nil
	}
	var err error
	if o.Max, err = whole("max", 0); err != nil {
		return err
	}
	if o.Total, err = whole("total", 1); err != nil {
		return err
	}
	if o.Rate, err = whole("rate", 1); err != nil {
		return err
	}
	if raw := strings.TrimSpace(r.FormValue("period")); raw != "" {
		d, perr := time.ParseDuration(raw)
		if perr != nil || d < time.Millisecond {
			return badRequestf("invalid period %q: want a duration of at least 1ms, such as 1s or 1m", raw)
		}
		o.Period = &d
		res.Period = &raw
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.QueryTimeout)
	defer cancel()
	switch {
	case res.Reset:
		err = limits.Reset(ctx, s.pool, s.schema, name)
	case o == (limits.Override{}):
		return badRequestf("nothing to set for limit %q: give a max, a total, a rate or a period, or reset", name)
	default:
		res.Max, res.Total, res.Rate = o.Max, o.Total, o.Rate
		err = limits.Set(ctx, s.pool, s.schema, name, o)
	}
	if errors.Is(err, limits.ErrUnknownLimit) {
		return notFoundf("limit %q not found", name)
	}
	if errors.Is(err, limits.ErrNoRate) || errors.Is(err, limits.ErrNotOverridable) {
		return badRequestf("%v", err)
	}
	if err != nil {
		return err
	}
	s.logger.InfoContext(r.Context(), "dashboard limit override", "limit", name, "reset", res.Reset,
		"max", r.FormValue("max"), "total", r.FormValue("total"), "rate", r.FormValue("rate"), "period", r.FormValue("period"))
	if isAPI(r) {
		writeJSON(w, http.StatusOK, res)
		return nil
	}
	http.Redirect(w, r, "/limits", http.StatusSeeOther)
	return nil
}
