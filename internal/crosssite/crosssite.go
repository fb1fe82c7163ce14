// Package crosssite tells a browser's request made by a web page of another
// site, which the dashboard and the HTTP API refuse for anything that changes
// state: browsers send such form-like requests without asking first, so a
// page on the web could otherwise act, through a visitor's browser, on a
// sortie server on the visitor's machine.
package crosssite

import (
	"net/http"
	"net/url"
)

// Request reports whether r was made by a page of another site: its
// Sec-Fetch-Site says cross-site, or its Origin names another host than
// the one it was sent to. Programs (curl, workers) send neither header.
func Request(r *http.Request) bool {
	if r.Header.Get("Sec-Fetch-Site") == "cross-site" {
		return true
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		return false
	}
	u, err := url.Parse(origin)
	return err != nil || u.Host != r.Host
}
