package dashboard

import (
	"context"
	"net/http"

	"github.com/tributary-run/tributary/migrations"
)

// handleHealthz answers 200 while the process serves HTTP: a liveness
// check that never touches the database.
func (s *Server) handleHealthz(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// handleReadyz answers 200 when the database answers and every migration
// is applied, 503 with the reason otherwise.
func (s *Server) handleReadyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.QueryTimeout)
	defer cancel()
	if err := s.pool.Ping(ctx); err != nil {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "unavailable", "reason": "database unreachable: " + err.Error()})
		return
	}
	m, err := migrations.New(s.pool, migrations.Config{Schema: s.schema})
	if err != nil {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "unavailable", "reason": err.Error()})
		return
	}
	current, err := m.Current(ctx)
	if err != nil {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "unavailable", "reason": "cannot read migrations: " + err.Error()})
		return
	}
	if !current {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "unavailable", "reason": "schema " + s.schema + " has pending migrations: run `tributary migrate up`"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}
