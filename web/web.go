// Package web is sortie's dashboard: server-rendered pages on a
// sortie.Client that work without JavaScript, and a small script
// (static/live.js) that updates them in place every few seconds without
// touching a form being filled in or rows being ticked.
//
// It shows the jobs per state and the queues (paused or not, jobs per
// state, latency, limits, the last hour of each) with a chart of the jobs
// finished over the last hour, day or week (the history the store keeps),
// each queue on a page of its own with its chart; lists jobs by state (tabs
// with counts), queue, kind, tag, args and error a page at a time, the
// scheduled ones by run time; shows one job whole (args, meta, result,
// every attempt's error with its stack, its workflow as a graph); shows the
// running jobs by process or remote worker with their progress, the
// processes, and the periodic schedules. Forms retry, run, cancel and
// delete jobs one at a time or many at once, pause and resume queues and
// quiet and stop processes; what loses something or acts on many jobs is
// confirmed on a page of its own first. Buttons show only to a session
// allowed to use them.
//
// Forms carry a token bound to the browser's session (a cookie of random
// bytes), and requests that change something from a page of another
// origin are refused. With Options.Tokens set, the
// dashboard asks for one of them once and keeps a session cookie.
package web

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/auth"
	"github.com/sortiehq/sortie/internal/crosssite"
	"github.com/sortiehq/sortie/internal/health"
	"github.com/sortiehq/sortie/internal/httperr"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static/style.css
var styleCSS []byte

//go:embed static/live.js
var liveJS []byte

// Options configure the dashboard.
type Options struct {
	// Tokens, when set and Keyring is nil, are asked for once (any one of
	// them); a session cookie then stands for it until the process
	// restarts.
	Tokens []string
	// Keyring holds named tokens with scopes (package auth). Signing in
	// takes a token with the read scope (pages) or admin (pages and
	// actions: retry, cancel, delete, pause); a session ends when its
	// token leaves the keyring. A work or enqueue token cannot sign in.
	Keyring *auth.Keyring
	// Throttle, when set, refuses sign-ins from an address that sent too
	// many tokens that were not accepted.
	Throttle *auth.Throttle
	// SampleEvery is ignored: the finished-jobs chart reads the history
	// the store keeps (Client.JobHistory) when the page is served.
	//
	// Deprecated: it did set how often an in-memory sampler read the
	// counts, which the stored history replaced.
	SampleEvery time.Duration
	// Refresh is how often the live pages (overview, queue, jobs, running,
	// processes, periodic) update themselves in place, in a browser with
	// JavaScript; each browser can turn it off. Defaults to 5 s; negative
	// turns it off for everyone.
	Refresh time.Duration
	// Logger logs failed store calls. Defaults to slog.Default().
	Logger *slog.Logger
}

// Dashboard is the dashboard's handler.
type Dashboard struct {
	c     *sortie.Client
	opts  Options
	key   []byte // signs the session cookie and the form tokens
	keys  *auth.Keyring
	pages map[string]*template.Template
	mux   *http.ServeMux
	// quiet keeps the warnings of failed store calls to one a minute: an
	// outage fails every page, and a live page asks every few seconds.
	quiet health.Quiet
}

// New returns the dashboard of c.
func New(c *sortie.Client, opts *Options) *Dashboard {
	d := &Dashboard{c: c}
	if opts != nil {
		d.opts = *opts
	}
	if d.opts.Logger == nil {
		d.opts.Logger = slog.Default()
	}
	if d.opts.Refresh == 0 {
		d.opts.Refresh = defaultRefresh
	}
	d.keys = auth.Plain(d.opts.Keyring, d.opts.Tokens)
	d.key = make([]byte, 32)
	_, _ = rand.Read(d.key)
	d.pages = parsePages()

	m := http.NewServeMux()
	page := func(pattern string, scope auth.Scope, h func(w http.ResponseWriter, r *http.Request) error) {
		m.Handle(pattern, d.authorized(scope, d.serve(h)))
	}
	page("GET /{$}", auth.ScopeRead, d.overview)
	page("GET /queues/{queue}", auth.ScopeRead, d.queue)
	page("POST /queues/{queue}/{action}", auth.ScopeAdmin, d.queueAction)
	page("GET /jobs", auth.ScopeRead, d.jobs)
	page("GET /jobs/{id}", auth.ScopeRead, d.job)
	page("POST /jobs/{id}/{action}", auth.ScopeAdmin, d.jobAction)
	page("POST /jobs/bulk", auth.ScopeAdmin, d.jobsBulk)
	page("GET /busy", auth.ScopeRead, d.busy)
	page("GET /processes", auth.ScopeRead, d.processes)
	page("POST /processes/{id}/{action}", auth.ScopeAdmin, d.processAction)
	page("GET /periodic", auth.ScopeRead, d.periodic)
	m.Handle("GET /refresh", d.serve(d.refreshToggle))
	m.Handle("GET /login", d.serve(d.loginPage))
	m.Handle("POST /login", d.serve(d.login))
	m.Handle("POST /logout", d.serve(d.logout))
	m.HandleFunc("GET /static/style.css", asset("text/css; charset=utf-8", styleCSS))
	m.HandleFunc("GET /static/live.js", asset("text/javascript; charset=utf-8", liveJS))
	m.HandleFunc("GET /favicon.ico", asset("image/x-icon", favicon()))
	m.Handle("/", d.serve(func(w http.ResponseWriter, r *http.Request) error {
		return notFound("No such page", fmt.Sprintf("There is no page at %s.", r.URL.Path))
	}))
	d.mux = m
	return d
}

// asset serves body, embedded, as a file of type ctype.
func asset(ctype string, body []byte) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", ctype)
		w.Header().Set("Cache-Control", "max-age=3600")
		_, _ = w.Write(body)
	}
}

// ServeHTTP implements http.Handler.
func (d *Dashboard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Frame-Options", "DENY")
	w.Header().Set("Content-Security-Policy", "default-src 'self'; frame-ancestors 'none'")
	w.Header().Set("Referrer-Policy", "same-origin")
	d.mux.ServeHTTP(w, r)
}

// Close releases what the dashboard holds: nothing since the chart reads
// the stored history (it used to stop a sampler). It is safe to call more
// than once.
func (d *Dashboard) Close() {}

// sign returns the hex HMAC of s under the process's key.
func (d *Dashboard) sign(s string) string {
	m := hmac.New(sha256.New, d.key)
	m.Write([]byte(s))
	return hex.EncodeToString(m.Sum(nil))
}

const (
	sessionCookie = "sortie_session"
	// formCookie holds the random ID of a browser's session, which its
	// form token signs.
	formCookie = "sortie_form"
)

// formToken returns the form token of r's browser session, starting a
// session (a cookie of random bytes) when r has none, so each browser has
// its own token and one seen by another cannot be replayed in it.
func (d *Dashboard) formToken(w http.ResponseWriter, r *http.Request) string {
	if c, err := r.Cookie(formCookie); err == nil && c.Value != "" {
		return d.sign("form:" + c.Value)
	}
	id := rand.Text()
	http.SetCookie(w, &http.Cookie{Name: formCookie, Value: id, Path: "/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	return d.sign("form:" + id)
}

// formOK reports whether r's form carries the token of its session.
func (d *Dashboard) formOK(r *http.Request) bool {
	c, err := r.Cookie(formCookie)
	if err != nil || c.Value == "" {
		return false
	}
	return hmac.Equal([]byte(r.PostFormValue("csrf")), []byte(d.sign("form:"+c.Value)))
}

// authorized sends a visitor without a session to the login page, when
// there are tokens, and refuses an action to a session whose token may
// not do it.
func (d *Dashboard) authorized(scope auth.Scope, next http.Handler) http.Handler {
	if d.keys == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok, ok := d.session(r)
		switch {
		case !ok:
			http.Redirect(w, r, "/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
		case !tok.Allows(scope):
			d.showError(w, r, &pageError{status: http.StatusForbidden, title: "Not allowed",
				msg: fmt.Sprintf("Token %q may look but not change: this needs a token with the %s scope.", tok.Name, scope)})
		default:
			next.ServeHTTP(w, r)
		}
	})
}

// sessionValue is the session cookie of token t: its name and a signature
// of its name and secret, so the session ends when the secret changes or
// the token goes.
func (d *Dashboard) sessionValue(t auth.Token) string {
	return url.QueryEscape(t.Name) + "." + d.sign("session:"+t.Name+"\x00"+t.Secret)
}

// session returns the token of r's session cookie, if it is one this
// process issued for a token still in the keyring.
func (d *Dashboard) session(r *http.Request) (auth.Token, bool) {
	c, err := r.Cookie(sessionCookie)
	if err != nil {
		return auth.Token{}, false
	}
	name, _, ok := strings.Cut(c.Value, ".")
	if !ok {
		return auth.Token{}, false
	}
	name, err = url.QueryUnescape(name)
	if err != nil {
		return auth.Token{}, false
	}
	t, ok := d.keys.Find(name)
	if !ok || !hmac.Equal([]byte(c.Value), []byte(d.sessionValue(t))) || !t.Allows(auth.ScopeRead) {
		return auth.Token{}, false
	}
	return t, true
}

// serve runs h after the form checks and shows its error, if any, as a
// page.
func (d *Dashboard) serve(h func(w http.ResponseWriter, r *http.Request) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var err error
		why := ""
		if r.Method == http.MethodPost {
			why = crosssite.Refusal(r)
		}
		switch {
		case why != "":
			err = httperr.Errorf(http.StatusForbidden, "A page of another site asked for this change; it was refused (%s).", why)
		case r.Method == http.MethodPost && !d.formOK(r):
			err = httperr.Errorf(http.StatusForbidden, "This form is out of date (the server restarted?): go back, reload the page and try again.")
		default:
			err = h(w, r)
		}
		if err == nil || r.Context().Err() != nil {
			return
		}
		d.showError(w, r, err)
	})
}

// showError answers r with the page of err: its status, a title and
// message in the user's words, and links that lead somewhere else than
// the page that failed (or, when the store failed, to try it again).
func (d *Dashboard) showError(w http.ResponseWriter, r *http.Request, err error) {
	status := statusOf(err)
	var pe *pageError
	if errors.As(err, &pe) {
		status = pe.status
	}
	if status >= 500 {
		kind := health.Kind(err)
		if pe != nil {
			kind = "page"
		}
		if ok, held := d.quiet.Allow(kind, time.Now()); ok {
			d.opts.Logger.WarnContext(r.Context(), "dashboard: store call failed", slog.String("path", r.URL.Path),
				slog.String("error", err.Error()), slog.Int("failed_since_last_line", held))
		}
	}
	msg := err.Error()
	switch {
	case status >= 500 && errors.Is(err, sortie.ErrStoreFull):
		msg = "The store has no room for what this page asked (" + msg + "). Nothing was changed by this page; " +
			"delete or prune finished jobs, or give the store more room, and try again."
	case status >= 500:
		msg = "The dashboard could not reach the store (" + msg + "). Nothing was changed by this page; try again in a moment."
	}
	var links []link
	if status >= 500 && r.Method == http.MethodGet {
		links = append(links, link{"Try again", r.URL.RequestURI()})
	}
	for _, l := range []link{{"Overview", "/"}, {"All jobs", "/jobs"}, {"Dead jobs", "/jobs?state=dead"}, {"Processes", "/processes"}} {
		if l.Href != r.URL.RequestURI() && status < 500 || status >= 500 && len(links) < 2 && l.Href != r.URL.RequestURI() {
			links = append(links, l)
		}
	}
	d.render(w, r, status, "error", map[string]any{"Title": errorTitle(err, status), "Message": msg, "Status": status,
		"Links": links, "Bare": d.keys != nil && !d.signedIn(r)})
}

// link is a link of a page: its text and target.
type link struct{ Text, Href string }

// signedIn reports whether r has a session (or none is needed).
func (d *Dashboard) signedIn(r *http.Request) bool {
	if d.keys == nil {
		return true
	}
	_, ok := d.session(r)
	return ok
}

// statusOf returns the HTTP status err is answered with (httperr.Status): a
// job whose kind no worker handles is invalid input.
func statusOf(err error) int {
	var ue *sortie.UnknownKindError
	if errors.As(err, &ue) {
		return http.StatusBadRequest
	}
	return httperr.Status(err)
}
