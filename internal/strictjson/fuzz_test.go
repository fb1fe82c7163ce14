package strictjson_test

import (
	"encoding/json"
	"testing"
	"unicode/utf8"

	"github.com/sortiehq/sortie/internal/strictjson"
)

// Whatever strictjson accepts is JSON in valid UTF-8 that encoding/json
// decodes into the same type, and it never panics.
func FuzzUnmarshal(f *testing.F) {
	for _, s := range []string{`{}`, `{"claim_token": 1, "jobs": [{"kind": "k", "args": {"a": [1, "\ud83d\ude00"]}}]}`,
		`{"jobs": [{"Kind": "k"}]}`, `{"a": 1, "a": 2}`, "\"\xff\"", `"\ud800"`, `[1, 2`, `{"jobs": [{"small": 300}]}`,
		`{"jobs": [{"progress": 1e400}]}`, `{"jobs": [{"meta": {"x": {"y": null}}, "tags": ["a", null]}]}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if strictjson.Check(data) == nil && (!json.Valid(data) || !utf8.Valid(data) || strictjson.ValidText(data) != nil) {
			t.Fatalf("Check accepted %q, which is not valid UTF-8 JSON", data)
		}
		var strict, loose request
		if strictjson.Unmarshal(data, &strict) == nil {
			if err := json.Unmarshal(data, &loose); err != nil {
				t.Fatalf("Unmarshal accepted %q, which encoding/json refuses: %v", data, err)
			}
		}
	})
}
