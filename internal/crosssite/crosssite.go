// Package crosssite tells a browser's request made by a web page of another
// origin, which the dashboard and the HTTP API refuse for anything that
// changes state: browsers send such form-like requests without asking
// first, so a page on the web could otherwise act, through a visitor's
// browser, on a sortie server on the visitor's machine.
package crosssite

import (
	"net/http"
	"net/url"
	"strconv"
)

// Refusal returns why r must be refused, or "" when it may go on. A
// browser says where a request comes from in Sec-Fetch-Site: only
// same-origin and none (typed by the user) are accepted, so a page of
// another site, or of the same site on another host, port or scheme
// (same-site), is refused. Browsers without Sec-Fetch-Site are judged by
// Origin, which must name the host the request was sent to. Programs
// (curl, workers) send neither header and are never refused.
func Refusal(r *http.Request) string {
	switch site := r.Header.Get("Sec-Fetch-Site"); site {
	case "", "same-origin", "none":
	default:
		return "its Sec-Fetch-Site header is " + shown(site) + ", and only same-origin or none may change anything"
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		return ""
	}
	if u, err := url.Parse(origin); err != nil || u.Host != r.Host {
		return "its Origin header is " + shown(origin) + ", not this server (" + shown(r.Host) + ")"
	}
	return ""
}

// shown quotes a header for a message, cut short when long.
func shown(s string) string {
	if len(s) > 100 {
		return strconv.Quote(s[:100]) + "..."
	}
	return strconv.Quote(s)
}
