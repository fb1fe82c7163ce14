package chaos

import (
	"strings"
)

// A badRequest is a request the API must refuse with a 4xx answer.
type badRequest struct {
	what         string
	method, path string
	body         []byte
}

// missingJob is an ID no job of the scenarios has.
const missingJob = "1099511627776"

// badRequests are the bad requests the API scenario mixes into its load:
// malformed and oversized bodies, values out of range, unknown fields,
// stale or missing claims, paths and methods that do not exist.
func badRequests() []badRequest {
	r := func(what, method, path, body string) badRequest {
		return badRequest{what: what, method: method, path: path, body: []byte(body)}
	}
	return []badRequest{
		r("truncated JSON", "POST", "/jobs", `{"kind": "chaos.api", "args": {`),
		r("no body", "POST", "/jobs", ``),
		r("not an object", "POST", "/jobs", `[1, 2, 3]`),
		r("trailing data", "POST", "/jobs", `{"kind": "chaos.api"} {"kind": "chaos.api"}`),
		r("empty kind", "POST", "/jobs", `{"kind": "", "queue": "api-bad"}`),
		r("unknown field", "POST", "/jobs", `{"kind": "chaos.api", "queue": "api-bad", "colour": "red"}`),
		r("priority out of range", "POST", "/jobs", `{"kind": "chaos.api", "queue": "api-bad", "priority": 9}`),
		r("priority of the wrong type", "POST", "/jobs", `{"kind": "chaos.api", "queue": "api-bad", "priority": "high"}`),
		r("negative max_attempts", "POST", "/jobs", `{"kind": "chaos.api", "queue": "api-bad", "max_attempts": -1}`),
		r("run_in not a duration", "POST", "/jobs", `{"kind": "chaos.api", "queue": "api-bad", "run_in": "soon"}`),
		r("args not JSON", "POST", "/jobs", `{"kind": "chaos.api", "queue": "api-bad", "args": nope}`),
		r("body over the limit", "POST", "/jobs", `{"kind": "chaos.api", "queue": "api-bad", "args": {"pad": "`+strings.Repeat("x", 2<<20)+`"}}`),
		r("empty batch", "POST", "/jobs/batch", `{"jobs": []}`),
		r("batch with a bad job", "POST", "/jobs/batch", `{"jobs": [{"kind": "chaos.api", "queue": "api-bad"}, {"kind": ""}]}`),
		r("fetch limit negative", "POST", "/fetch", `{"queue": "api-bad", "limit": -1}`),
		r("fetch limit too large", "POST", "/fetch", `{"queue": "api-bad", "limit": 1000000}`),
		r("fetch lease too short", "POST", "/fetch", `{"queue": "api-bad", "lease": "10ms"}`),
		r("fetch wait too long", "POST", "/fetch", `{"queue": "api-bad", "wait": "1h"}`),
		r("report with no claim", "POST", "/jobs/"+missingJob+"/complete", `{}`),
		r("report on a missing job", "POST", "/jobs/"+missingJob+"/complete", `{"claim_token": 7}`),
		r("report on a bad ID", "POST", "/jobs/seven/complete", `{"claim_token": 7}`),
		r("result not JSON", "POST", "/jobs/"+missingJob+"/complete", `{"claim_token": 7, "result": {]}`),
		r("discard and retry_in", "POST", "/jobs/"+missingJob+"/fail", `{"claim_token": 7, "discard": true, "retry_in": "1s"}`),
		r("retry_in not a duration", "POST", "/jobs/"+missingJob+"/fail", `{"claim_token": 7, "retry_in": "later"}`),
		r("heartbeat lease too long", "POST", "/jobs/"+missingJob+"/heartbeat", `{"claim_token": 7, "lease": "100h"}`),
		r("heartbeat progress out of range", "POST", "/jobs/"+missingJob+"/heartbeat", `{"claim_token": 7, "progress": 101}`),
		r("cancel a missing job", "POST", "/jobs/"+missingJob+"/cancel", ``),
		r("get a missing job", "GET", "/jobs/"+missingJob, ``),
		r("list by an unknown state", "GET", "/jobs?state=lost", ``),
		r("list limit zero", "GET", "/jobs?limit=0", ``),
		r("list with an unknown parameter", "GET", "/jobs?colour=red", ``),
		r("a key twice", "POST", "/jobs", `{"kind": "chaos.api", "queue": "api-bad", "queue": "api-bad2"}`),
		r("a field name in the wrong case", "POST", "/jobs", `{"Kind": "chaos.api", "queue": "api-bad"}`),
		r("args not valid UTF-8", "POST", "/jobs", "{\"kind\": \"chaos.api\", \"queue\": \"api-bad\", \"args\": {\"s\": \"\xff\xfe\"}}"),
		r("kind not valid UTF-8", "POST", "/jobs", "{\"kind\": \"chaos.\xc3\x28\", \"queue\": \"api-bad\"}"),
		r("fetch an empty kind", "POST", "/fetch", `{"queue": "api-bad", "kinds": [""]}`),
		r("fetch a queue name of 100 KB", "POST", "/fetch", `{"queue": "`+strings.Repeat("q", 100<<10)+`"}`),
		r("heartbeat on a missing job", "POST", "/jobs/"+missingJob+"/heartbeat", `{"claim_token": 7}`),
		r("unknown endpoint", "GET", "/nothing-here", ``),
		r("wrong method", "DELETE", "/queues", ``),
	}
}
