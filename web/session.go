package web

import (
	"net/http"
	"time"

	"github.com/sortiehq/sortie/auth"
	"github.com/sortiehq/sortie/internal/httperr"
)

func (d *Dashboard) loginPage(w http.ResponseWriter, r *http.Request) error {
	d.render(w, r, http.StatusOK, "login", map[string]any{"Title": "Sign in", "Next": safeNext(r.URL.Query().Get("next"))})
	return nil
}

// login: POST /login with a token; sets the session cookie.
func (d *Dashboard) login(w http.ResponseWriter, r *http.Request) error {
	next := safeNext(r.PostFormValue("next"))
	if d.keys == nil {
		http.Redirect(w, r, next, http.StatusSeeOther)
		return nil
	}
	addr := auth.ClientAddr(r)
	if th := d.opts.Throttle; th != nil {
		if wait := th.Wait(addr); wait > 0 {
			return httperr.Errorf(http.StatusTooManyRequests, "Too many tokens that were not accepted came from %s: wait %s and try again.",
				addr, wait.Round(time.Second))
		}
	}
	t, ok := d.keys.Check(r.PostFormValue("token"))
	if !ok || !t.Allows(auth.ScopeRead) {
		if !ok && d.opts.Throttle != nil {
			d.opts.Throttle.Refused(addr)
		}
		d.render(w, r, http.StatusUnauthorized, "login", map[string]any{"Title": "Sign in", "Next": next, "Failed": true,
			"Scope": ok})
		return nil
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: d.sessionValue(t), Path: "/",
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	http.Redirect(w, r, next, http.StatusSeeOther)
	return nil
}

func (d *Dashboard) logout(w http.ResponseWriter, r *http.Request) error {
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, "/login", http.StatusSeeOther)
	return nil
}

// refreshCookie turns the pages' live refresh off ("off") for a browser.
const refreshCookie = "sortie_refresh"

// defaultRefresh is how often the live pages update themselves in place
// (static/live.js) unless Options.Refresh says otherwise.
const defaultRefresh = 5 * time.Second

// refreshToggle: GET /refresh?to=on|off&next=PATH turns the pages' live
// refresh on or off for this browser, then goes back.
func (d *Dashboard) refreshToggle(w http.ResponseWriter, r *http.Request) error {
	c := &http.Cookie{Name: refreshCookie, Value: "off", Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: r.TLS != nil, MaxAge: 365 * 24 * 3600}
	switch r.URL.Query().Get("to") {
	case "off":
	case "on":
		c.Value, c.MaxAge = "", -1
	default:
		return httperr.Errorf(http.StatusBadRequest, "Live refresh goes on or off, not %q.", r.URL.Query().Get("to"))
	}
	http.SetCookie(w, c)
	http.Redirect(w, r, safeNext(r.URL.Query().Get("next")), http.StatusSeeOther)
	return nil
}
