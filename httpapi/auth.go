package httpapi

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/sortiehq/sortie/auth"
)

// requestInfo is filled in as a request goes through the handler, for its
// log line.
type requestInfo struct {
	token string
}

type requestInfoKey struct{}

// authorized refuses requests without a token allowing scope, when the
// handler has tokens: 401 without an accepted one, 403 when the token may
// not do this, 429 when the address sent too many refused tokens.
func (a *api) authorized(scope auth.Scope, next http.Handler) http.Handler {
	if a.keys == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		addr := auth.ClientAddr(r)
		if th := a.opts.Throttle; th != nil {
			if wait := th.Wait(addr); wait > 0 {
				secs := int(math.Ceil(wait.Seconds()))
				w.Header().Set("Retry-After", strconv.Itoa(secs))
				writeJSON(w, http.StatusTooManyRequests, map[string]string{"error": fmt.Sprintf(
					"too many requests with a bearer token that was not accepted from %s: try again in %d s", addr, secs)})
				return
			}
		}
		got, ok := bearer(r.Header.Get("Authorization"))
		tok, found := a.keys.Check(got)
		if !ok || !found {
			if ok && a.opts.Throttle != nil {
				a.opts.Throttle.Refused(addr)
			}
			w.Header().Set("WWW-Authenticate", `Bearer realm="sortie"`)
			msg := "missing bearer token: send Authorization: Bearer TOKEN"
			if ok {
				msg = "bearer token not accepted"
			}
			writeJSON(w, http.StatusUnauthorized, map[string]string{"error": msg})
			return
		}
		if info, _ := r.Context().Value(requestInfoKey{}).(*requestInfo); info != nil {
			info.token = tok.Name
		}
		if !tok.Allows(scope) {
			writeJSON(w, http.StatusForbidden, map[string]string{"error": fmt.Sprintf(
				"token %q may not do this: %s needs a token with the %s scope", tok.Name, r.Pattern, scope)})
			return
		}
		next.ServeHTTP(w, r)
	})
}

// statusWriter remembers the status and size of a response.
type statusWriter struct {
	http.ResponseWriter
	status int
	bytes  int64
}

func (w *statusWriter) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	w.bytes += int64(n)
	return n, err
}

// Unwrap lets http.ResponseController reach the connection.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// logged writes a line per request to the request log, when there is one.
func (a *api) logged(next http.Handler) http.Handler {
	log := a.opts.RequestLog
	if log == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		info := &requestInfo{}
		sw := &statusWriter{ResponseWriter: w}
		r = r.WithContext(context.WithValue(r.Context(), requestInfoKey{}, info))
		next.ServeHTTP(sw, r)
		route := r.Pattern
		if route == "" {
			route = r.URL.Path
		}
		attrs := []slog.Attr{
			slog.String("method", r.Method), slog.String("route", route), slog.String("path", r.URL.Path),
			slog.Int("status", sw.status), slog.Int64("bytes", sw.bytes),
			slog.Float64("duration_ms", float64(time.Since(start).Microseconds())/1000),
			slog.String("remote", auth.ClientAddr(r)),
		}
		if info.token != "" {
			attrs = append(attrs, slog.String("token", info.token))
		}
		// A 503 is a store that failed, which the API's own warning
		// reports once a minute, not once a request.
		level := slog.LevelInfo
		if sw.status >= 500 && sw.status != http.StatusServiceUnavailable {
			level = slog.LevelWarn
		}
		log.LogAttrs(r.Context(), level, "http request", attrs...)
	})
}

// logJob writes a job line (a remote worker started or finished a job) to
// the request log, when there is one.
func (a *api) logJob(ctx context.Context, msg string, attrs ...slog.Attr) {
	if a.opts.RequestLog != nil {
		a.opts.RequestLog.LogAttrs(ctx, slog.LevelInfo, msg, attrs...)
	}
}

// Protect serves h behind the same tokens, throttle and request log as
// the API, for requests with a token allowing scope: serve puts GET
// /metrics (scope read) behind it.
func Protect(h http.Handler, scope auth.Scope, opts *Options) http.Handler {
	a := &api{}
	if opts != nil {
		a.opts = *opts
	}
	a.keys = auth.Plain(a.opts.Keyring, a.opts.Tokens)
	return a.logged(a.authorized(scope, h))
}
