package strictjson_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sortiehq/sortie/internal/strictjson"
)

type token struct {
	ClaimToken int64 `json:"claim_token"`
}

type job struct {
	Kind     string          `json:"kind"`
	Args     json.RawMessage `json:"args"`
	Priority int             `json:"priority"`
	Tags     []string        `json:"tags"`
	Meta     map[string]any  `json:"meta"`
	Progress *float64        `json:"progress"`
	Small    int8            `json:"small"`
	Ignored  string          `json:"-"`
}

type request struct {
	token
	Jobs []job `json:"jobs"`
}

func TestUnmarshalAccepts(t *testing.T) {
	t.Parallel()
	var got request
	doc := `{"claim_token": 7, "jobs": [{"kind": "k", "args": {"a": [1, {"b": "\ud83d\ude00"}]}, "priority": 2,
		"tags": ["x", ""], "meta": {"m": {"n": 1}}, "progress": 40.5, "small": -128}, {"kind": "ü", "args": null, "tags": null,
		"meta": null, "progress": null}]}`
	if err := strictjson.Unmarshal([]byte(doc), &got); err != nil {
		t.Fatalf("Unmarshal(%s) = %v", doc, err)
	}
	p := 40.5
	want := request{token: token{7}, Jobs: []job{
		{Kind: "k", Args: json.RawMessage(`{"a": [1, {"b": "\ud83d\ude00"}]}`), Priority: 2, Tags: []string{"x", ""},
			Meta: map[string]any{"m": map[string]any{"n": 1.0}}, Progress: &p, Small: -128},
		{Kind: "ü", Args: json.RawMessage("null")},
	}}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(request{})); diff != "" {
		t.Errorf("Unmarshal decoded (-want +got):\n%s", diff)
	}
}

func TestUnmarshalRefuses(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, doc, want string
	}{
		{"case-insensitive name", `{"jobs": [{"Kind": "k"}]}`, `jobs[0] has unknown field "Kind" (names are case-sensitive: did you mean "kind"?)`},
		{"unknown field", `{"claim_tokn": 1}`, `request body has unknown field "claim_tokn"`},
		{"skipped field", `{"jobs": [{"Ignored": "x"}]}`, `jobs[0] has unknown field "Ignored"`},
		{"duplicate top key", `{"claim_token": 1, "claim_token": 2}`, `request body has the key "claim_token" twice`},
		{"duplicate escaped key", `{"jobs": [{"kind": "a", "\u006bind": "b"}]}`, `jobs[0] has the key "kind" twice`},
		{"duplicate key in args", `{"jobs": [{"args": {"x": {"a": 1, "a": 2}}}]}`, `jobs[0].args.x has the key "a" twice`},
		{"duplicate key in meta", `{"jobs": [{"meta": {"a": 1, "a": 1}}]}`, `jobs[0].meta has the key "a" twice`},
		{"invalid UTF-8 in a string", "{\"jobs\": [{\"kind\": \"k\xff\"}]}", `jobs[0].kind is not valid UTF-8`},
		{"invalid UTF-8 in args", "{\"jobs\": [{\"args\": {\"s\": [\"ok\", \"\xc3\x28\"]}}]}", `jobs[0].args.s[1] is not valid UTF-8`},
		{"invalid UTF-8 in a key", "{\"jobs\": [{\"args\": {\"\xff\": 1}}]}", `jobs[0].args has a key that is not valid UTF-8`},
		{"lone high surrogate", `{"jobs": [{"kind": "a\ud800b"}]}`, `jobs[0].kind is not valid Unicode: \ud800 is the first half`},
		{"lone low surrogate in args", `{"jobs": [{"args": ["\udc00"]}]}`, `jobs[0].args[0] is not valid Unicode: \udc00 is the second half`},
		{"reversed pair", `{"jobs": [{"kind": "\ude00\ud83d"}]}`, `jobs[0].kind is not valid Unicode`},
		{"string for an integer", `{"jobs": [{"priority": "high"}]}`, `jobs[0].priority must be an integer, got a string`},
		{"fraction for an integer", `{"jobs": [{"priority": 1.5}]}`, `jobs[0].priority must be an integer from -9223372036854775808 to 9223372036854775807, got 1.5`},
		{"integer out of range", `{"jobs": [{"small": 128}]}`, `jobs[0].small must be an integer from -128 to 127, got 128`},
		{"huge integer", `{"claim_token": 99999999999999999999}`, `claim_token must be an integer from`},
		{"number too big", `{"jobs": [{"progress": 1e400}]}`, `jobs[0].progress must be a number within`},
		{"number for a string", `{"jobs": [{"kind": 5}]}`, `jobs[0].kind must be a string, got a number`},
		{"object for an array", `{"jobs": {}}`, `jobs must be an array, got an object`},
		{"array for the body", `[]`, `request body must be an object, got an array`},
		{"string in tags", `{"jobs": [{"tags": "x"}]}`, `jobs[0].tags must be an array, got a string`},
		{"null for a string", `{"jobs": [{"kind": null}]}`, `jobs[0].kind must be a string, got null (leave it out for its default)`},
		{"null in an array", `{"jobs": [{"tags": ["x", null]}]}`, `jobs[0].tags[1] must be a string, got null`},
		{"null for an integer", `{"claim_token": null}`, `claim_token must be an integer, got null`},
		{"odd key path", `{"jobs": [{"meta": {"a b": {"c": true, "c": false}}}]}`, `jobs[0].meta["a b"] has the key "c" twice`},
		{"long key", `{"` + strings.Repeat("k", 100) + `": 1}`, `has unknown field "kkkk`},
		{"trailing data", `{} {}`, `request body has more after its JSON value`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var got request
			err := strictjson.Unmarshal([]byte(tt.doc), &got)
			var se *strictjson.Error
			if !errors.As(err, &se) {
				t.Fatalf("Unmarshal(%q) = %v, want a *strictjson.Error", tt.doc, err)
			}
			if msg := se.Describe("request body"); !strings.Contains(msg, tt.want) {
				t.Errorf("Unmarshal(%q) = %q, want it to contain %q", tt.doc, msg, tt.want)
			}
			if len(se.Describe("request body")) > 300 {
				t.Errorf("message is %d bytes long, want a short one", len(se.Describe("x")))
			}
		})
	}
}

func TestUnmarshalSyntax(t *testing.T) {
	t.Parallel()
	for _, doc := range []string{`{"claim_token": 1`, `{"claim_token" 1}`, `{"jobs": [}`, `nul`, `{"claim_token": 1,}`, "{\"jobs\": [{\"kind\": \"\\x\"}]}"} {
		var got request
		err := strictjson.Unmarshal([]byte(doc), &got)
		var se *strictjson.SyntaxError
		if !errors.As(err, &se) {
			t.Errorf("Unmarshal(%q) = %v, want a *strictjson.SyntaxError", doc, err)
		}
	}
}

func TestDepth(t *testing.T) {
	t.Parallel()
	deep := strings.Repeat("[", strictjson.MaxDepth+1) + strings.Repeat("]", strictjson.MaxDepth+1)
	if err := strictjson.Check([]byte(deep)); err == nil || !strings.Contains(err.Error(), "nests more than 10000 levels") {
		t.Errorf("Check(%d nested arrays) = %v, want too deep", strictjson.MaxDepth+1, err)
	}
	ok := strings.Repeat("[", strictjson.MaxDepth) + strings.Repeat("]", strictjson.MaxDepth)
	if err := strictjson.Check([]byte(ok)); err != nil {
		t.Errorf("Check(%d nested arrays) = %v, want nil", strictjson.MaxDepth, err)
	}
}

func TestValidText(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		text string
		ok   bool
	}{
		{`{"a": "plain"}`, true},
		{`"\ud83d\ude00 and \u00e9 and \\ud800 and \"\\"`, true},
		{`["\ud83d"]`, false},
		{`["\ud83d\u0041"]`, false},
		{`["\udfff"]`, false},
		{`"x\\\ud800"`, false},
		{"\"\xe2\x82\"", false},
		{"\"\xed\xa0\x80\"", false}, // a surrogate encoded in UTF-8 bytes
	} {
		if err := strictjson.ValidText([]byte(tt.text)); (err == nil) != tt.ok {
			t.Errorf("ValidText(%q) = %v, want ok %v", tt.text, err, tt.ok)
		}
	}
}
