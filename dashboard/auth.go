package dashboard

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// sessionCookie is the login form's cookie. It holds an expiry and an HMAC
// over it keyed by the token, never the token itself, so it is valid on
// every replica that shares the token and stops working when the token
// changes.
const sessionCookie = "tributary_session"

// csrfField is the form field (or X-CSRF-Token header) carrying the CSRF
// token for cookie-authenticated actions.
const csrfField = "csrf"

type authenticator struct {
	token   string
	key     []byte // HMAC key derived from the token
	ttl     time.Duration
	nowFunc func() time.Time
}

func newAuthenticator(token string, ttl time.Duration) *authenticator {
	a := &authenticator{token: token, ttl: ttl, nowFunc: time.Now}
	if token != "" {
		sum := sha256.Sum256([]byte("tributary-dashboard-session\x00" + token))
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

func (a *authenticator) newSession() (value string, expires time.Time) {
	expires = a.nowFunc().Add(a.ttl)
	exp := strconv.FormatInt(expires.Unix(), 10)
	return exp + "." + a.mac("session:"+exp), expires
}

// sessionOK checks a cookie value's MAC and expiry.
func (a *authenticator) sessionOK(value string) bool {
	if a.token == "" {
		return false
	}
	exp, mac, ok := strings.Cut(value, ".")
	if !ok {
		return false
	}
	unix, err := strconv.ParseInt(exp, 10, 64)
	if err != nil || a.nowFunc().After(time.Unix(unix, 0)) {
		return false
	}
	return hmac.Equal([]byte(mac), []byte(a.mac("session:"+exp)))
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
	if c, err := r.Cookie(sessionCookie); err == nil && a.sessionOK(c.Value) {
		v.LoggedIn = true
		v.CSRF = a.csrfFor(c.Value)
	}
	return v
}

// requireAuth guards an action:
//   - no token configured: 403, the dashboard is read-only;
//   - a bearer token: 200 if it matches, else 401 (no CSRF check: a browser
//     never attaches an Authorization header on its own);
//   - the session cookie: 401 if invalid or expired, 403 unless the request
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
			return h(w, r)
		}
		c, err := r.Cookie(sessionCookie)
		if err != nil {
			return &httpError{status: http.StatusUnauthorized, msg: "this action needs the dashboard token: send Authorization: Bearer TOKEN or log in"}
		}
		if !a.sessionOK(c.Value) {
			return &httpError{status: http.StatusUnauthorized, msg: "the login session is invalid or expired: log in again"}
		}
		if !sameOrigin(r) {
			return &httpError{status: http.StatusForbidden, msg: "cross-origin request refused"}
		}
		given := r.Header.Get("X-CSRF-Token")
		if given == "" {
			given = r.PostFormValue(csrfField)
		}
		if !hmac.Equal([]byte(given), []byte(a.csrfFor(c.Value))) {
			return &httpError{status: http.StatusForbidden, msg: "missing or wrong CSRF token: reload the page and try again"}
		}
		return h(w, r)
	}
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

// handleLogin checks the token from the form and sets the session cookie
// (HttpOnly, SameSite=Strict).
func (s *Server) handleLogin(w http.ResponseWriter, r *http.Request) error {
	next := safeNext(r.PostFormValue("next"))
	if s.auth.readOnly() {
		s.renderStatus(w, r, http.StatusForbidden, "login", "Log in", "", loginView{Next: next, Message: "The dashboard is read-only: no TRIBUTARY_DASHBOARD_TOKEN is configured."})
		return nil
	}
	if !sameOrigin(r) {
		return &httpError{status: http.StatusForbidden, msg: "cross-origin login refused"}
	}
	if !s.auth.tokenOK(r.PostFormValue("token")) {
		s.renderStatus(w, r, http.StatusUnauthorized, "login", "Log in", "", loginView{Next: next, Message: "Wrong token."})
		return nil
	}
	value, expires := s.auth.newSession()
	http.SetCookie(w, &http.Cookie{
		Name: sessionCookie, Value: value, Path: "/", Expires: expires,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil,
	})
	http.Redirect(w, r, next, http.StatusSeeOther)
	return nil
}

func (s *Server) handleLogout(w http.ResponseWriter, r *http.Request) error {
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
