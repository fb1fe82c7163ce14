package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/internal/jobjson"
	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/memstore"
)

// The contract, tested from the document's side: for every operation of
// openapi.json, requests are made from its schemas alone, and the server
// must agree with the document on each. A valid request (every required
// member, then each optional one in turn, with what it requires) must not
// get a 4xx; an invalid one (each range, enum, pattern, format, length,
// type, required member and required combination broken in turn, one at a
// time) must get 400 naming the member, and the document must refuse it
// too. Every answer is checked against the document (contractChecked).
//
// The schemas cannot know which jobs exist: a fixture per request gives
// the IDs, claim tokens, queue and process the request is about, and
// overlays them on what the schemas made.
func TestContractGenerated(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	g := &generator{doc: doc}
	paths := doc["paths"].(map[string]any)
	var sent, valid, invalid int
	for _, p := range sortedKeys(paths) {
		item := paths[p].(map[string]any)
		for _, method := range sortedKeys(item) {
			op, ok := item[method].(map[string]any)
			if !ok || method == "parameters" {
				continue
			}
			name := fmt.Sprint(op["operationId"])
			for _, c := range g.cases(strings.ToUpper(method), p, op) {
				sent++
				if c.invalid == "" {
					valid++
				} else {
					invalid++
				}
				g.run(t, name, c)
			}
		}
	}
	t.Logf("%d requests made from openapi.json: %d valid, %d invalid", sent, valid, invalid)
}

// generator makes requests from the document.
type generator struct {
	doc map[string]any
}

// genCase is one request: its path and query with placeholders for the
// fixture ({id}, {queue}, ...), its body (nil for none), and, when it is
// invalid, the member it breaks and how.
type genCase struct {
	method, path string
	query        url.Values
	body         any
	// invalid names the member the request gets wrong ("" for a valid
	// request); why says how; inPath, that it is a path parameter.
	invalid, why string
	inPath       bool
}

// resolve returns s with its $ref followed, the keys beside the $ref
// kept.
func (g *generator) resolve(s map[string]any) map[string]any {
	ref, ok := s["$ref"].(string)
	if !ok {
		return s
	}
	target := any(g.doc)
	for _, part := range strings.Split(strings.TrimPrefix(ref, "#/"), "/") {
		target = target.(map[string]any)[part]
	}
	out := map[string]any{}
	for k, v := range g.resolve(target.(map[string]any)) {
		out[k] = v
	}
	for k, v := range s {
		if k != "$ref" {
			out[k] = v
		}
	}
	return out
}

// types returns the JSON types s allows ("null" included).
func (g *generator) types(s map[string]any) []string {
	s = g.resolve(s)
	switch t := s["type"].(type) {
	case string:
		return []string{t}
	case []any:
		var out []string
		for _, x := range t {
			out = append(out, x.(string))
		}
		return out
	}
	var out []string
	for _, key := range []string{"anyOf", "oneOf"} {
		alts, _ := s[key].([]any)
		for _, a := range alts {
			am := g.resolve(a.(map[string]any))
			if c, ok := am["const"]; ok {
				out = append(out, jsonType(c))
				continue
			}
			out = append(out, g.types(am)...)
		}
	}
	return out
}

func jsonType(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "string"
	case bool:
		return "boolean"
	case float64:
		return "number"
	}
	return "object"
}

// valid returns a value s allows.
func (g *generator) valid(s map[string]any) any {
	s = g.resolve(s)
	if c, ok := s["const"]; ok {
		return c
	}
	if e, ok := s["enum"].([]any); ok {
		for _, v := range e {
			if v != nil {
				return v
			}
		}
	}
	if d, ok := s["x-duration-min"].(string); ok && d != "0s" {
		return d
	}
	if d, ok := s["x-duration-max"].(string); ok {
		return d
	}
	if ex, ok := s["examples"].([]any); ok && len(ex) > 0 {
		return ex[0]
	}
	for _, key := range []string{"anyOf", "oneOf"} {
		if alts, ok := s[key].([]any); ok {
			for _, a := range alts {
				if am := g.resolve(a.(map[string]any)); !slices.Equal(g.types(am), []string{"null"}) {
					return g.valid(am)
				}
			}
		}
	}
	types := slices.DeleteFunc(g.types(s), func(t string) bool { return t == "null" })
	if len(types) == 0 {
		return map[string]any{}
	}
	switch types[0] {
	case "string":
		if s["format"] == "date-time" {
			return time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
		}
		n := 3
		if m, ok := s["minLength"].(float64); ok && int(m) > n {
			n = int(m)
		}
		return strings.Repeat("a", n)
	case "integer", "number":
		// 1 where allowed: 0 often means "the default", the least telling.
		v := 1.0
		if m, ok := s["minimum"].(float64); ok && m > v {
			v = m
		}
		if m, ok := s["maximum"].(float64); ok && m < v {
			v = m
		}
		return v
	case "boolean":
		return true
	case "array":
		items, _ := s["items"].(map[string]any)
		return []any{g.valid(items)}
	case "object":
		return g.object(s, "")
	}
	return nil
}

// object returns an object s allows: its required members, what they
// require, a member one of anyOf requires, and with the optional member
// also (with what it requires) when also is not "".
func (g *generator) object(s map[string]any, also string) map[string]any {
	props, _ := s["properties"].(map[string]any)
	out := map[string]any{}
	var add func(name string)
	add = func(name string) {
		if _, done := out[name]; done {
			return
		}
		ps, _ := props[name].(map[string]any)
		out[name] = g.valid(ps)
		if dr, ok := s["dependentRequired"].(map[string]any); ok {
			for _, q := range asStrings(dr[name]) {
				add(q)
			}
		}
		if ds, ok := s["dependentSchemas"].(map[string]any); ok {
			if dep, ok := ds[name].(map[string]any); ok {
				for q, qs := range dep["properties"].(map[string]any) {
					out[q] = g.valid(qs.(map[string]any))
				}
			}
		}
	}
	for _, r := range asStrings(s["required"]) {
		add(r)
	}
	if also != "" {
		add(also)
	}
	if alts, ok := s["anyOf"].([]any); ok && !g.anyHolds(alts, out) {
		add(asStrings(alts[0].(map[string]any)["required"])[0])
	}
	if m, ok := s["minProperties"].(float64); ok && len(out) < int(m) {
		add(sortedKeys(props)[0])
	}
	return out
}

// anyHolds reports whether out has the members one of alts requires.
func (g *generator) anyHolds(alts []any, out map[string]any) bool {
	for _, a := range alts {
		req := asStrings(a.(map[string]any)["required"])
		if len(req) == 0 {
			return true
		}
		ok := true
		for _, r := range req {
			if _, has := out[r]; !has {
				ok = false
			}
		}
		if ok {
			return true
		}
	}
	return false
}

// breakings returns the values that break s, each with why.
func (g *generator) breakings(s map[string]any) []struct {
	value any
	why   string
} {
	s = g.resolve(s)
	type bad = struct {
		value any
		why   string
	}
	var out []bad
	types := g.types(s)
	if len(types) > 0 && !slices.Contains(types, "null") {
		out = append(out, bad{nil, "null"})
	}
	if len(types) > 0 && !slices.Contains(types, "string") {
		out = append(out, bad{"x", "a string"})
	} else if len(types) > 0 && !slices.Contains(types, "number") && !slices.Contains(types, "integer") {
		out = append(out, bad{12345, "a number"})
	}
	if e, ok := s["enum"].([]any); ok && slices.Contains(types, "string") {
		out = append(out, bad{"not-a-choice", "not one of " + fmt.Sprint(e)})
	}
	if m, ok := s["minimum"].(float64); ok {
		out = append(out, bad{m - 1, "below minimum " + fmt.Sprint(m)})
	}
	if m, ok := s["maximum"].(float64); ok && m < 1e15 {
		out = append(out, bad{m + 1, "above maximum " + fmt.Sprint(m)})
	}
	if m, ok := s["minLength"].(float64); ok && m > 0 {
		out = append(out, bad{strings.Repeat("a", int(m)-1), "shorter than " + fmt.Sprint(m)})
	}
	if m, ok := s["maxLength"].(float64); ok {
		out = append(out, bad{strings.Repeat("a", int(m)+1), "longer than " + fmt.Sprint(m)})
	}
	if p, ok := s["pattern"].(string); ok {
		if re, err := regexp.Compile(p); err == nil && !re.MatchString("no way!") {
			out = append(out, bad{"no way!", "not matching " + p})
		}
	}
	if s["format"] == "date-time" {
		out = append(out, bad{"tomorrow", "not a date-time"})
	}
	if d, ok := s["x-duration-min"].(string); ok {
		if v, err := time.ParseDuration(d); err == nil && v > 0 {
			out = append(out, bad{(v - time.Millisecond).String(), "below " + d})
		}
	}
	if d, ok := s["x-duration-multiple-of"].(string); ok {
		if v, err := time.ParseDuration(d); err == nil {
			out = append(out, bad{(v + v/2).String(), "not a multiple of " + d})
		}
	}
	if d, ok := s["x-duration-max"].(string); ok {
		if v, err := time.ParseDuration(d); err == nil {
			out = append(out, bad{(v + time.Second).String(), "above " + d})
		}
	}
	if m, ok := s["maxItems"].(float64); ok {
		items, _ := s["items"].(map[string]any)
		many := make([]any, int(m)+1)
		for i := range many {
			many[i] = g.valid(items)
			if str, ok := many[i].(string); ok {
				many[i] = str + strconv.Itoa(i)
			}
		}
		out = append(out, bad{many, "more than " + fmt.Sprint(m) + " items"})
	}
	return out
}

// bodyCases returns the valid and invalid bodies of schema s, an object:
// name prefixes the members' names in messages ("jobs[0].").
func (g *generator) bodyCases(s map[string]any, name string) (valid []map[string]any, invalid []genCase) {
	s = g.resolve(s)
	props, _ := s["properties"].(map[string]any)
	valid = append(valid, g.object(s, ""))
	for _, p := range sortedKeys(props) {
		with := g.object(s, p)
		valid = append(valid, with)
		for _, b := range g.breakings(props[p].(map[string]any)) {
			body := clone(with)
			body[p] = b.value
			invalid = append(invalid, genCase{body: body, invalid: name + p, why: b.why})
		}
	}
	base := g.object(s, "")
	for _, r := range asStrings(s["required"]) {
		body := clone(base)
		delete(body, r)
		invalid = append(invalid, genCase{body: body, invalid: name + r, why: "missing"})
	}
	if dr, ok := s["dependentRequired"].(map[string]any); ok {
		for _, p := range sortedKeys(dr) {
			for _, q := range asStrings(dr[p]) {
				body := g.object(s, p)
				delete(body, q)
				invalid = append(invalid, genCase{body: body, invalid: name + q, why: "required by " + p})
			}
		}
	}
	if not, ok := s["not"].(map[string]any); ok {
		if both := asStrings(not["required"]); len(both) == 2 {
			body := g.object(s, both[0])
			body[both[1]] = g.valid(props[both[1]].(map[string]any))
			invalid = append(invalid, genCase{body: body, invalid: name + both[0], why: "together with " + both[1]})
		}
	}
	if ds, ok := s["dependentSchemas"].(map[string]any); ok {
		for _, p := range sortedKeys(ds) {
			dep := ds[p].(map[string]any)["properties"].(map[string]any)
			for q := range dep {
				qs := g.resolve(props[q].(map[string]any))
				allowed := asAny(g.resolve(dep[q].(map[string]any)))
				for _, v := range qs["enum"].([]any) {
					if !slices.Contains(allowed, v) {
						body := g.object(s, p)
						body[q] = v
						invalid = append(invalid, genCase{body: body, invalid: name + p, why: fmt.Sprintf("with %s %v", q, v)})
						break
					}
				}
			}
		}
	}
	if s["additionalProperties"] == false {
		body := clone(base)
		body["unknown_member"] = 1
		invalid = append(invalid, genCase{body: body, invalid: name + "unknown_member", why: "not in the schema"})
	}
	if m, ok := s["minProperties"].(float64); ok && m > 0 {
		invalid = append(invalid, genCase{body: map[string]any{}, invalid: "request body", why: "empty"})
	}
	if alts, ok := s["anyOf"].([]any); ok {
		body := clone(base)
		for _, a := range alts {
			for _, r := range asStrings(a.(map[string]any)["required"]) {
				delete(body, r)
			}
		}
		if !g.anyHolds(alts, body) {
			first := asStrings(alts[0].(map[string]any)["required"])[0]
			invalid = append(invalid, genCase{body: body, invalid: name + first, why: "none of the members of anyOf"})
			// A member anyOf asks to be non-empty, given empty.
			for _, a := range alts {
				am := a.(map[string]any)
				ps, _ := am["properties"].(map[string]any)
				for _, q := range sortedKeys(ps) {
					if ps[q].(map[string]any)["minLength"] != nil {
						empty := clone(body)
						empty[q] = ""
						invalid = append(invalid, genCase{body: empty, invalid: name + first, why: q + " empty, the only filter"})
						break
					}
				}
			}
		}
	}
	// One level down: the first item of an array of objects (a batch's
	// jobs, the reports).
	for _, p := range sortedKeys(props) {
		ps := g.resolve(props[p].(map[string]any))
		items, ok := ps["items"].(map[string]any)
		if !ok || !slices.Contains(g.types(items), "object") {
			continue
		}
		vs, is := g.bodyCases(items, fmt.Sprintf("%s%s[0].", name, p))
		for _, v := range vs[1:] {
			body := clone(base)
			body[p] = []any{v}
			valid = append(valid, body)
		}
		for _, c := range is {
			body := clone(base)
			body[p] = []any{c.body}
			c.body = body
			invalid = append(invalid, c)
		}
	}
	return valid, invalid
}

// cases returns the requests of operation op, method path.
func (g *generator) cases(method, path string, op map[string]any) []genCase {
	var params []map[string]any
	if item, ok := g.doc["paths"].(map[string]any)[path].(map[string]any); ok {
		for _, p := range asAny(item["parameters"]) {
			params = append(params, g.resolve(p.(map[string]any)))
		}
	}
	for _, p := range asAny(op["parameters"]) {
		params = append(params, g.resolve(p.(map[string]any)))
	}
	base := genCase{method: method, path: path, query: url.Values{}}
	var out []genCase
	// The query: none, then each parameter alone, valid and broken.
	var bodies []map[string]any
	var badBodies []genCase
	if rb, ok := op["requestBody"].(map[string]any); ok {
		s := rb["content"].(map[string]any)["application/json"].(map[string]any)["schema"].(map[string]any)
		bodies, badBodies = g.bodyCases(s, "")
		base.body = bodies[0]
	}
	out = append(out, base)
	for _, p := range params {
		name, in := p["name"].(string), p["in"].(string)
		s := p["schema"].(map[string]any)
		if in == "query" {
			c := base
			v := g.valid(s)
			if arr, ok := v.([]any); ok {
				v = arr[0] // an exploded array: the parameter once
			}
			c.query = url.Values{name: {fmt.Sprint(v)}}
			out = append(out, c)
		}
		for _, b := range g.breakings(s) {
			if b.value == nil || b.why == "a number" || (b.why == "a string" && in == "path") || (in == "path" && b.value == "") {
				continue // a query or path has no null, any value is a string, and an empty segment is another path
			}
			c := base
			v := fmt.Sprint(b.value)
			if f, ok := b.value.(float64); ok {
				v = strconv.FormatFloat(f, 'f', -1, 64)
			}
			if in == "query" {
				c.query = url.Values{name: {v}}
			} else {
				c.path = strings.ReplaceAll(c.path, "{"+name+"}", url.PathEscape(v))
			}
			c.invalid, c.why, c.inPath = name, b.why, in == "path"
			out = append(out, c)
		}
	}
	for _, b := range bodies[min(1, len(bodies)):] {
		c := base
		c.body = b
		out = append(out, c)
	}
	for _, b := range badBodies {
		c := base
		c.body, c.invalid, c.why = b.body, b.invalid, b.why
		out = append(out, c)
	}
	return out
}

// fixture is what a generated request is about: a fresh server with a
// job in a queue of its own (claimed when the request reports on a
// claim), another job it may depend on, and a registered process.
type fixture struct {
	s                 *server
	job, other, token int64
	queue, kind       string
	process           string
	// empty is a queue in use (paused) that holds no job: the one a
	// DELETE of a queue can remove.
	empty string
}

func newFixture(t *testing.T, claim bool) *fixture {
	t.Helper()
	st := memstore.New()
	t.Cleanup(func() { _ = st.Close() })
	f := &fixture{s: newServer(t, st, nil), queue: "gen-queue", kind: "gen.kind", process: "gen-process-1", empty: "gen-empty"}
	ctx := context.Background()
	c, err := sortie.NewClient(st, &sortie.Config{Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []*int64{&f.other, &f.job} {
		res, err := c.Enqueue(ctx, jobjson.RawArgs{JobKind: f.kind, JSON: []byte(`{}`)}, &sortie.EnqueueOpts{Queue: f.queue})
		if err != nil {
			t.Fatal(err)
		}
		*id = res.ID
	}
	if claim {
		jobs, err := store.FetchedJobs(st.JobFetch(ctx, &store.JobFetchParams{Queue: f.queue, Limit: 2, Worker: "gen", Now: time.Now(), Lease: time.Minute}))
		if err != nil || len(jobs) != 2 {
			t.Fatalf("JobFetch = %v, %v", jobs, err)
		}
		f.token = jobs[1].ClaimToken
	}
	if _, err := st.ProcessBeat(ctx, &store.ProcessBeatParams{Now: time.Now(), Process: store.ProcessRow{ID: f.process, StartedAt: time.Now()}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.QueuePause(ctx, f.empty); err != nil {
		t.Fatal(err)
	}
	return f
}

// overlay puts the fixture's values where the schemas could only guess:
// the members that name a job, a claim, a queue or a kind.
func (f *fixture) overlay(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, val := range x {
			out[k] = val
			if !isPlain(val) {
				out[k] = f.overlay(val)
				continue
			}
			switch k {
			case "id":
				out[k] = f.job
			case "claim_token":
				out[k] = f.token
			case "queue":
				out[k] = f.queue
			case "depends_on":
				out[k] = []any{f.other}
			case "kinds":
				out[k] = []any{f.kind}
			case "unique_key":
				out[k] = "gen-unique"
			case "after":
				out[k] = 0
			}
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = f.overlay(e)
		}
		return out
	}
	return v
}

// isPlain reports whether v is what a schema made for a member the
// fixture overlays: not an object, nor an array of objects.
func isPlain(v any) bool {
	switch x := v.(type) {
	case map[string]any:
		return false
	case []any:
		return len(x) == 0 || !func() bool { _, ok := x[0].(map[string]any); return ok }()
	}
	return true
}

// run sends c to a fresh fixture and checks the answer.
func (g *generator) run(t *testing.T, op string, c genCase) {
	t.Helper()
	claim := c.body != nil && strings.Contains(fmt.Sprint(c.body), "claim_token")
	f := newFixture(t, claim)
	queue := f.queue
	if op == "deleteQueue" {
		queue = f.empty // a queue with jobs is refused with 409, as documented
	}
	path := strings.NewReplacer("{queue}", queue, "{command}", "quiet").Replace(c.path)
	if strings.HasPrefix(path, "/api/v1/processes/") {
		path = strings.Replace(path, "{id}", f.process, 1)
	}
	path = strings.Replace(path, "{id}", strconv.FormatInt(f.job, 10), 1)
	q := url.Values{}
	for k, vs := range c.query {
		q[k] = vs
		if c.invalid == "" && (k == "queue" || k == "kind") {
			q[k] = []string{map[string]string{"queue": f.queue, "kind": f.kind}[k]}
		}
	}
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var body []byte
	if c.body != nil {
		v := c.body
		if c.invalid == "" || !strings.Contains(c.why, "missing") && !strings.HasSuffix(c.why, "the only filter") {
			v = f.overlay(c.body)
			if c.invalid != "" {
				v = reapply(v, c)
			}
		}
		body, _ = json.Marshal(v)
	}
	req := newRequest(c.method, path, string(body))
	if c.invalid != "" {
		req = malformed(req)
	}
	rec := f.s.serve(req)
	what := fmt.Sprintf("%s: %s %s %s", op, c.method, path, body)
	if c.invalid == "" {
		if rec.Code >= 400 && rec.Code < 500 {
			t.Errorf("%s: a request openapi.json allows got %d %s", what, rec.Code, rec.Body)
		}
		return
	}
	named := strings.Contains(strings.ToLower(rec.Body.String()), strings.ToLower(lastName(c.invalid)))
	switch {
	case c.inPath && rec.Code == http.StatusNotFound && strings.Contains(rec.Body.String(), "no such endpoint"):
		// A path parameter out of its enum names no endpoint: 404, as
		// the document says.
	case rec.Code != http.StatusBadRequest || !named:
		t.Errorf("%s (%s %s): got %d %s, want 400 naming %s", what, c.invalid, c.why, rec.Code, strings.TrimSpace(rec.Body.String()), lastName(c.invalid))
	}
	// libopenapi-validator does not check the items of an exploded query
	// array against their pattern, nor the x-duration bounds, which no
	// JSON Schema keyword can say; the server does.
	if c.query != nil && c.invalid == "args" || strings.HasPrefix(c.why, "below ") && !strings.HasPrefix(c.why, "below minimum") ||
		strings.HasPrefix(c.why, "above ") && !strings.HasPrefix(c.why, "above maximum") ||
		strings.HasPrefix(c.why, "not a multiple") {
		return
	}
	if g.docAllows(t, c.method, path, body) {
		t.Errorf("%s (%s %s): openapi.json allows this request, which the server refuses", what, c.invalid, c.why)
	}
}

// reapply puts the broken member of c back after the overlay, which may
// have replaced it with the fixture's value.
func reapply(v any, c genCase) any {
	name := c.invalid
	if strings.Contains(name, "[0].") {
		outer, inner, _ := strings.Cut(name, "[0].")
		obj := v.(map[string]any)
		items := obj[outer].([]any)
		orig := c.body.(map[string]any)[outer].([]any)[0].(map[string]any)
		if val, ok := orig[inner]; ok {
			items[0].(map[string]any)[inner] = val
		}
		return v
	}
	if obj, ok := v.(map[string]any); ok {
		if val, ok := c.body.(map[string]any)[name]; ok {
			obj[name] = val
		}
	}
	return v
}

// docAllows reports whether the document allows the request.
func (g *generator) docAllows(t *testing.T, method, path string, body []byte) bool {
	req := newRequest(method, path, string(body))
	if len(body) > 0 {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Body = io.NopCloser(bytes.NewReader(body))
	ok, _ := loadedContract(t).open.ValidateHttpRequestSync(req)
	return ok
}

// lastName is the member a message must name: "jobs[0].kind" names kind.
func lastName(s string) string {
	if i := strings.LastIndex(s, "."); i >= 0 {
		return s[i+1:]
	}
	return s
}

func clone(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func asStrings(v any) []string {
	var out []string
	for _, x := range asAny(v) {
		out = append(out, x.(string))
	}
	return out
}

func asAny(v any) []any {
	switch x := v.(type) {
	case []any:
		return x
	case map[string]any:
		if e, ok := x["enum"].([]any); ok {
			return e
		}
		if c, ok := x["const"]; ok {
			return []any{c}
		}
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
