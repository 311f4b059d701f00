package dashboard

import (
	"bytes"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tributary-run/tributary/jobs/events"
	"github.com/tributary-run/tributary/jobs/workflow"
	"github.com/tributary-run/tributary/queue"
)

//go:embed templates/*.html static/*
var assets embed.FS

func staticFS() fs.FS {
	sub, err := fs.Sub(assets, "static")
	if err != nil {
		panic(err) // the embed pattern guarantees the folder
	}
	return sub
}

// httpError is an error with the status code the client gets; its message
// is shown to the client.
type httpError struct {
	status int
	msg    string
}

func (e *httpError) Error() string { return e.msg }

func badRequestf(format string, args ...any) error {
	return &httpError{status: http.StatusBadRequest, msg: fmt.Sprintf(format, args...)}
}

func notFoundf(format string, args ...any) error {
	return &httpError{status: http.StatusNotFound, msg: fmt.Sprintf(format, args...)}
}

// handlerFunc is an HTTP handler that returns its error; wrap turns the
// error into a response.
type handlerFunc func(w http.ResponseWriter, r *http.Request) error

func (s *Server) wrap(h handlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if p := recover(); p != nil {
				s.logger.ErrorContext(r.Context(), "dashboard handler panicked", "path", r.URL.Path, "panic", fmt.Sprint(p))
				s.writeError(w, r, &httpError{status: http.StatusInternalServerError, msg: "internal error"})
			}
		}()
		if err := h(w, r); err != nil {
			s.writeError(w, r, err)
		}
	})
}

func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	var he *httpError
	if !errors.As(err, &he) {
		s.logger.ErrorContext(r.Context(), "dashboard request failed", "path", r.URL.Path, "error", err)
		he = &httpError{status: http.StatusInternalServerError, msg: err.Error()}
	}
	if he.status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="tributary"`)
	}
	if isAPI(r) {
		writeJSON(w, he.status, map[string]string{"error": he.msg})
		return
	}
	s.renderStatus(w, r, he.status, "error", "Error", "", map[string]any{"Status": he.status, "StatusText": http.StatusText(he.status), "Message": he.msg})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// pages holds one parsed template set per page.
type pages struct {
	byName map[string]*template.Template
}

var pageNames = []string{"overview", "jobs", "job", "outbox", "schedules", "batches", "amqp", "login", "error", "lanes", "consumers", "workflows", "workflow", "limits"}

func loadPages() (*pages, error) {
	p := &pages{byName: map[string]*template.Template{}}
	for _, name := range pageNames {
		t, err := template.New("layout.html").Funcs(templateFuncs).ParseFS(assets, "templates/layout.html", "templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("error parsing dashboard template %s: %w", name, err)
		}
		p.byName[name] = t
	}
	return p, nil
}

// view is what every template gets.
type view struct {
	Title string
	Nav   string
	Auth  authView
	// Path is the current path with query, for the login form's return.
	Path string
	Page any
}

// render writes data as JSON under /api/ and as the named page otherwise.
func (s *Server) render(w http.ResponseWriter, r *http.Request, name, title, nav string, data any) error {
	if isAPI(r) {
		writeJSON(w, http.StatusOK, data)
		return nil
	}
	s.renderStatus(w, r, http.StatusOK, name, title, nav, data)
	return nil
}

func (s *Server) renderStatus(w http.ResponseWriter, r *http.Request, status int, name, title, nav string, data any) {
	t := s.pages.byName[name]
	v := view{Title: title, Nav: nav, Auth: s.auth.viewFor(r), Path: r.URL.RequestURI(), Page: data}
	var buf bytes.Buffer
	if err := t.Execute(&buf, v); err != nil {
		s.logger.ErrorContext(r.Context(), "error rendering dashboard page", "page", name, "error", err)
		http.Error(w, "error rendering page", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = buf.WriteTo(w)
}

var templateFuncs = template.FuncMap{
	"num":            formatNum,
	"count":          formatCount,
	"ts":             formatTime,
	"ago":            formatAgo,
	"seconds":        formatSeconds,
	"pretty":         prettyJSON,
	"join":           strings.Join,
	"title":          func(s string) string { return strings.ToUpper(s[:min(1, len(s))]) + s[min(1, len(s)):] },
	"stateOf":        func(m map[string]queue.Count, state string) queue.Count { return m[state] },
	"contains":       slices.Contains[[]string],
	"states":         queue.JobStates,
	"live":           queue.LiveJobStates,
	"outboxStatuses": events.Statuses,
	"preview":        preview,
	"sub":            func(a, b int) int { return a - b },
	"pathEscape":     url.PathEscape,
	"int64":          func(n int) int64 { return int64(n) },
	"bytes":          formatBytes,
	"workflowStatuses": func() []string {
		var out []string
		for _, st := range workflow.Statuses() {
			out = append(out, string(st))
		}
		return out
	},
	"dict": func(kv ...any) map[string]any {
		m := map[string]any{}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1]
		}
		return m
	},
}

// preview is the start of s, at most n bytes of it, marked when cut.
func preview(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return truncateUTF8(s, n) + "…"
}

// formatNum writes n with thousands separators.
func formatNum(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

func formatCount(c queue.Count) string {
	if c.Approximate {
		return "≈" + formatNum(c.N)
	}
	return formatNum(c.N)
}

func formatTime(t any) string {
	switch v := t.(type) {
	case time.Time:
		if v.IsZero() {
			return "—"
		}
		return v.UTC().Format(time.DateTime + ".000Z")
	case *time.Time:
		if v == nil {
			return "—"
		}
		return formatTime(*v)
	}
	return fmt.Sprint(t)
}

func formatAgo(t any) string {
	var tt time.Time
	switch v := t.(type) {
	case time.Time:
		tt = v
	case *time.Time:
		if v == nil {
			return ""
		}
		tt = *v
	}
	if tt.IsZero() {
		return ""
	}
	d := time.Since(tt)
	if d < 0 {
		return "in " + formatSeconds(-d.Seconds())
	}
	return formatSeconds(d.Seconds()) + " ago"
}

func formatSeconds(sec float64) string {
	d := time.Duration(sec * float64(time.Second))
	switch {
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%.1fs", d.Seconds())
	case d < time.Hour:
		return fmt.Sprintf("%dm %ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh %dm", int(d.Hours()), int(d.Minutes())%60)
	default:
		return fmt.Sprintf("%dd %dh", int(d.Hours())/24, int(d.Hours())%24)
	}
}

func formatBytes(n int64) string {
	switch {
	case n < 1<<10:
		return fmt.Sprintf("%d B", n)
	case n < 1<<20:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	case n < 1<<30:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	default:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	}
}

// prettyShowMax bounds the JSON a page shows; the JSON API has it whole.
const prettyShowMax = 64 << 10

func prettyJSON(raw json.RawMessage) string {
	if len(raw) > prettyShowMax {
		return truncateUTF8(string(raw), prettyShowMax) + fmt.Sprintf("\n… (%s in all; the JSON API has it whole)", formatBytes(int64(len(raw))))
	}
	var buf bytes.Buffer
	if err := json.Indent(&buf, raw, "", "  "); err != nil {
		return string(raw)
	}
	return buf.String()
}
