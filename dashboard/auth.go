package dashboard

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// sessionCookie is the login form's cookie. It holds a random secret,
// never the token; the session it names lives in tributary_dashboard_session
// (session.go), so a logout on one replica ends it on all of them.
const sessionCookie = "tributary_session"

// csrfField is the form field (or X-CSRF-Token header) carrying the CSRF
// token for cookie-authenticated actions.
const csrfField = "csrf"

type authenticator struct {
	token    string
	key      []byte // HMAC key derived from the token
	sessions *sessionStore
	limiter  *loginLimiter
	logger   *slog.Logger
	nowFunc  func() time.Time
}

func newAuthenticator(cfg Config, pool *pgxpool.Pool, schema string) *authenticator {
	a := &authenticator{
		token:    cfg.Token,
		sessions: &sessionStore{pool: pool, schema: schema, ttl: cfg.SessionTTL, idle: cfg.SessionIdleTimeout, timeout: cfg.QueryTimeout},
		limiter:  newLoginLimiter(LoginLimiterEntries),
		logger:   cfg.Logger,
		nowFunc:  time.Now,
	}
	if cfg.Token != "" {
		sum := sha256.Sum256([]byte("tributary-dashboard-session\x00" + cfg.Token))
		a.key = sum[:]
	}
	return a
}

func (a *authenticator) readOnly() bool { return a.token == "" }

// tokenOK compares in constant time; hashing first makes the comparison
// independent of the lengths too.
func (a *authenticator) tokenOK(given string) bool {
	if a.token == "" {
		return false
	}
	want := sha256.Sum256([]byte(a.token))
	got := sha256.Sum256([]byte(given))
	return subtle.ConstantTimeCompare(want[:], got[:]) == 1
}

func (a *authenticator) mac(msg string) string {
	m := hmac.New(sha256.New, a.key)
	m.Write([]byte(msg))
	return hex.EncodeToString(m.Sum(nil))
}

// sessionID is the key of a cookie's session row. Keyed by the token, so
// a changed token ends every session, and a copy of the table logs nobody
// in.
func (a *authenticator) sessionID(secret string) string { return a.mac("session:" + secret) }

// sessionCtxKey marks a request whose cookie requireAuth already checked.
type sessionCtxKey struct{}

// session returns the request's session secret if its cookie names a live
// session.
func (a *authenticator) session(r *http.Request) (secret string, ok bool, err error) {
	if secret, ok := r.Context().Value(sessionCtxKey{}).(string); ok {
		return secret, true, nil
	}
	c, err := r.Cookie(sessionCookie)
	if err != nil || c.Value == "" || a.readOnly() {
		return "", false, nil
	}
	ok, err = a.sessions.valid(r.Context(), a.sessionID(c.Value), a.nowFunc())
	if err != nil || !ok {
		return "", false, err
	}
	return c.Value, true, nil
}

// csrfFor is the CSRF token that goes with a session: forms carry it, and a
// cookie-authenticated action without it is refused.
func (a *authenticator) csrfFor(session string) string { return a.mac("csrf:" + session) }

// authView is what templates need to show the login state and build forms.
type authView struct {
	ReadOnly bool
	LoggedIn bool
	CSRF     string
}

func (a *authenticator) viewFor(r *http.Request) authView {
	v := authView{ReadOnly: a.readOnly()}
	secret, ok, err := a.session(r)
	if err != nil {
		// The page still renders, without the action buttons.
		a.logger.WarnContext(r.Context(), "error checking the dashboard session", "error", err)
	}
	if ok {
		v.LoggedIn = true
		v.CSRF = a.csrfFor(secret)
	}
	return v
}

// requireAuth guards an action:
//   - no token configured: 403, the dashboard is read-only;
//   - a bearer token: 200 if it matches, else 401 (no CSRF check: a browser
//     never attaches an Authorization header on its own);
//   - the session cookie: 401 unless it names a live session (not logged
//     out, not idle too long, within its lifetime), 403 unless the request
//     is same-origin (Origin, else Referer) and carries the session's CSRF
//     token;
//   - nothing: 401.
func (s *Server) requireAuth(h handlerFunc) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		a := s.auth
		if a.readOnly() {
			return &httpError{status: http.StatusForbidden, msg: "the dashboard is read-only: set TRIBUTARY_DASHBOARD_TOKEN to enable actions"}
		}
		if authz := r.Header.Get("Authorization"); authz != "" {
			scheme, token, _ := strings.Cut(authz, " ")
			if !strings.EqualFold(scheme, "Bearer") || !a.tokenOK(strings.TrimSpace(token)) {
				return &httpError{status: http.StatusUnauthorized, msg: "invalid bearer token"}
			}
			if err := parseActionForm(r); err != nil {
				return err
			}
			return h(w, r)
		}
		if _, err := r.Cookie(sessionCookie); err != nil {
			return &httpError{status: http.StatusUnauthorized, msg: "this action needs the dashboard token: send Authorization: Bearer TOKEN or log in"}
		}
		secret, ok, err := a.session(r)
		if err != nil {
			return err
		}
		if !ok {
			return &httpError{status: http.StatusUnauthorized, msg: "the login session is invalid, expired or logged out: log in again"}
		}
		if !sameOrigin(r) {
			return &httpError{status: http.StatusForbidden, msg: "cross-origin request refused"}
		}
		if err := parseActionForm(r); err != nil {
			return err
		}
		given := r.Header.Get("X-CSRF-Token")
		if given == "" {
			given = r.PostFormValue(csrfField)
		}
		if !hmac.Equal([]byte(given), []byte(a.csrfFor(secret))) {
			return &httpError{status: http.StatusForbidden, msg: "missing or wrong CSRF token: reload the page and try again"}
		}
		return h(w, r.WithContext(context.WithValue(r.Context(), sessionCtxKey{}, secret)))
	}
}

// parseActionForm parses an action's query and form body up front: the
// form readers ignore a body that does not parse, so `limit=5;x` would
// replay a whole dead-letter queue instead of five messages.
func parseActionForm(r *http.Request) error {
	if err := r.ParseForm(); err != nil {
		return badRequestf("invalid query string or form body: %v", err)
	}
	return nil
}

// sameOrigin requires the Origin header, or failing that the Referer, to
// name this host. A request with neither is refused: every browser sends
// Origin on a form POST today.
func sameOrigin(r *http.Request) bool {
	src := r.Header.Get("Origin")
	if src == "" || src == "null" {
		src = r.Header.Get("Referer")
	}
	if src == "" {
		return false
	}
	u, err := url.Parse(src)
	if err != nil {
		return false
	}
	return u.Host != "" && strings.EqualFold(u.Host, r.Host)
}

func (s *Server) handleLoginForm(w http.ResponseWriter, r *http.Request) error {
	return s.render(w, r, "login", "Log in", "", loginView{Next: safeNext(r.URL.Query().Get("next"))})
}

type loginView struct {
	Next    string
	Message string
}

// handleLogin checks the token from the form, slowing an address that
// keeps sending wrong ones, stores a new session and sets its cookie
// (HttpOnly, SameSite=Strict).
func (s *Server) handleLogin(w http.ResponseWriter, r *http.Request) error {
	a := s.auth
	next := safeNext(r.PostFormValue("next"))
	if a.readOnly() {
		s.renderStatus(w, r, http.StatusForbidden, "login", "Log in", "", loginView{Next: next, Message: "The dashboard is read-only: no TRIBUTARY_DASHBOARD_TOKEN is configured."})
		return nil
	}
	if !sameOrigin(r) {
		return &httpError{status: http.StatusForbidden, msg: "cross-origin login refused"}
	}
	client, now := clientKey(r), a.nowFunc()
	if wait := a.limiter.wait(client, now); wait > 0 {
		// Not even checked: a right token now would tell a guesser it was
		// right without the wait.
		s.tooManyLogins(w, r, next, "", wait)
		return nil
	}
	if !a.tokenOK(r.PostFormValue("token")) {
		if wait := a.limiter.fail(client, now); wait > 0 {
			s.logger.WarnContext(r.Context(), "dashboard login failed repeatedly; slowing the address", "client", client.String(), "retry_after", wait)
			s.tooManyLogins(w, r, next, "Wrong token. ", wait)
			return nil
		}
		s.renderStatus(w, r, http.StatusUnauthorized, "login", "Log in", "", loginView{Next: next, Message: "Wrong token."})
		return nil
	}
	a.limiter.succeed(client)
	secret, err := newSessionSecret()
	if err != nil {
		return err
	}
	expires, err := a.sessions.create(r.Context(), a.sessionID(secret), now)
	if err != nil {
		return err
	}
	http.SetCookie(w, &http.Cookie{
		Name: sessionCookie, Value: secret, Path: "/", Expires: expires,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil,
	})
	http.Redirect(w, r, next, http.StatusSeeOther)
	return nil
}

// tooManyLogins answers 429 with Retry-After in whole seconds, rounded up.
func (s *Server) tooManyLogins(w http.ResponseWriter, r *http.Request, next, prefix string, wait time.Duration) {
	secs := int64((wait + time.Second - 1) / time.Second)
	w.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
	s.renderStatus(w, r, http.StatusTooManyRequests, "login", "Log in", "", loginView{
		Next: next, Message: fmt.Sprintf("%sToo many failed logins from your address: try again in %d seconds.", prefix, secs),
	})
}

// handleLogout deletes the session row, so the cookie is dead everywhere
// even if a copy of it survives, then clears the cookie.
func (s *Server) handleLogout(w http.ResponseWriter, r *http.Request) error {
	if c, err := r.Cookie(sessionCookie); err == nil && c.Value != "" && !s.auth.readOnly() {
		if err := s.auth.sessions.revoke(r.Context(), s.auth.sessionID(c.Value)); err != nil {
			return err
		}
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, "/", http.StatusSeeOther)
	return nil
}

// safeNext keeps redirects on this site: a local absolute path only.
func safeNext(next string) string {
	if next == "" || !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") || strings.HasPrefix(next, "/\\") {
		return "/"
	}
	return next
}
