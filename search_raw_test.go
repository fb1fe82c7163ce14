package sortie

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
)

// decodedMatch is what an args match means: decode the whole document,
// follow the path, compare the values (numbers by value). rawLookup and
// matchRaw must agree with it on every valid document.
func decodedMatch(doc []byte, path []string, want any) bool {
	var v any
	d := json.NewDecoder(bytes.NewReader(doc))
	d.UseNumber()
	if d.Decode(&v) != nil {
		return false
	}
	for _, p := range path {
		switch x := v.(type) {
		case map[string]any:
			var ok bool
			if v, ok = x[p]; !ok {
				return false
			}
		case []any:
			i, err := strconv.Atoi(p)
			if err != nil || i < 0 || i >= len(x) {
				return false
			}
			v = x[i]
		default:
			return false
		}
	}
	return equalJSON(v, want)
}

func rawMatch(doc []byte, path []string, want any) bool {
	raw, ok := rawLookup(doc, path)
	return ok && matchRaw(raw, want)
}

func TestRawLookupCases(t *testing.T) {
	doc := `{"user":{"id":42,"name":"Ada","tags":["a","b"]},"n":6.0,"s":"caf\u00e9","k\"q":1,` +
		`"dup":1,"dup":2,"e":"","neg":-1.5e3,"t":true,"z":null,"deep":[[1,{"x":"y"}]], "sp" : [ 1 , 2 ] }`
	cases := []struct {
		path, value string
		want        bool
	}{
		{"user.id", "42", true},
		{"user.id", "42.0", true},
		{"user.id", "4.2e1", true},
		{"user.id", `"42"`, false},
		{"user.name", "Ada", true},
		{"user.name", `"Ada"`, true},
		{"user.name", "ada", false},
		{"user.tags.1", "b", true},
		{"user.tags.2", "b", false},
		{"user.tags.-1", "a", false},
		{"user.tags.x", "a", false},
		{"user", `{"name":"Ada","tags":["a","b"],"id":42}`, true},
		{"n", "6", true},
		{"s", "café", true},
		{`k"q`, "1", true},
		{"dup", "2", true},
		{"dup", "1", false},
		{"e", `""`, true},
		{"neg", "-1500", true},
		{"t", "true", true},
		{"z", "null", true},
		{"deep.0.1.x", "y", true},
		{"deep.0.0.x", "y", false},
		{"sp.1", "2", true},
		{"missing", "1", false},
		{"n.x", "1", false},
	}
	for _, c := range cases {
		want, err := canonicalValue(c.value)
		if err != nil {
			t.Fatal(err)
		}
		path := strings.Split(c.path, ".")
		if got := rawMatch([]byte(doc), path, want); got != c.want {
			t.Errorf("%s = %s: raw match %v, want %v", c.path, c.value, got, c.want)
		}
		if got := decodedMatch([]byte(doc), path, want); got != c.want {
			t.Errorf("%s = %s: decoded match %v, want %v (the case is wrong)", c.path, c.value, got, c.want)
		}
	}
}

// Random documents, paths into them and values from them: the raw walk
// and the whole decode agree every time.
func TestRawLookupAgreesWithDecoding(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for n := range 20_000 {
		v := randomJSON(r, 3)
		doc, _ := json.Marshal(v)
		if r.IntN(4) == 0 {
			doc = spaced(r, doc)
		}
		path := randomPath(r, v)
		value := randomValueText(r, v, path)
		want, err := canonicalValue(value)
		if err != nil {
			continue
		}
		raw, dec := rawMatch(doc, path, want), decodedMatch(doc, path, want)
		if raw != dec {
			t.Fatalf("case %d: %s, path %q = %s: raw %v, decoded %v", n, doc, path, value, raw, dec)
		}
	}
}

// FuzzRawLookup checks the agreement on arbitrary bytes too: on valid
// JSON both must agree; on anything else the raw walk must not panic.
func FuzzRawLookup(f *testing.F) {
	f.Add([]byte(`{"a":{"b":[1,2,{"c":"d"}]}}`), "a.b.2.c", "d")
	f.Add([]byte(`{"a":1,"a":"x"}`), "a", "x")
	f.Add([]byte(`{"a\u0062":1}`), "ab", "1")
	f.Add([]byte(`[1,[2,3]]`), "1.0", "2")
	f.Add([]byte(`{"a":"\ud800"}`), "a", "\ufffd")
	f.Fuzz(func(t *testing.T, doc []byte, path, value string) {
		parts := strings.Split(path, ".")
		want, err := canonicalValue(value)
		if err != nil {
			return
		}
		raw := rawMatch(doc, parts, want)
		if json.Valid(doc) && raw != decodedMatch(doc, parts, want) {
			t.Fatalf("%s, path %q = %s: raw %v, decoded %v", doc, parts, value, raw, !raw)
		}
	})
}

func randomJSON(r *rand.Rand, depth int) any {
	k := r.IntN(8)
	if depth == 0 {
		k = r.IntN(5)
	}
	switch k {
	case 0:
		return nil
	case 1:
		return r.IntN(2) == 0
	case 2:
		return json.Number(randomNumber(r))
	case 3:
		return randomString(r)
	case 4:
		return json.Number(strconv.Itoa(r.IntN(10)))
	case 5, 6:
		m := map[string]any{}
		for range r.IntN(4) {
			m[randomString(r)] = randomJSON(r, depth-1)
		}
		return m
	default:
		a := []any{}
		for range r.IntN(4) {
			a = append(a, randomJSON(r, depth-1))
		}
		return a
	}
}

func randomNumber(r *rand.Rand) string {
	forms := []string{"%d", "%d.0", "%de0", "-%d", "%d.5", "%dE2"}
	return fmt.Sprintf(forms[r.IntN(len(forms))], r.IntN(20))
}

func randomString(r *rand.Rand) string {
	parts := []string{"a", "b", "id", "é", `"`, `\`, "\n", "x.y", "1", "<", "\u2028"}
	var b strings.Builder
	for range r.IntN(3) {
		b.WriteString(parts[r.IntN(len(parts))])
	}
	return b.String()
}

// spaced puts whitespace after every comma and colon outside strings:
// the decoder ignores it and so must the walk.
func spaced(r *rand.Rand, doc []byte) []byte {
	var out []byte
	in := false
	for i := 0; i < len(doc); i++ {
		c := doc[i]
		out = append(out, c)
		switch {
		case in && c == '\\':
			i++
			out = append(out, doc[i])
		case c == '"':
			in = !in
		case !in && (c == ',' || c == ':' || c == '[' || c == '{'):
			out = append(out, " \n\t"[r.IntN(3)])
		}
	}
	return out
}

// randomPath follows v a few steps, sometimes off the document.
func randomPath(r *rand.Rand, v any) []string {
	var path []string
	for range 1 + r.IntN(3) {
		switch x := v.(type) {
		case map[string]any:
			if len(x) == 0 || r.IntN(8) == 0 {
				return append(path, "nope")
			}
			for k, w := range x {
				path, v = append(path, k), w
				break
			}
		case []any:
			i := r.IntN(len(x) + 1)
			path = append(path, strconv.Itoa(i))
			if i == len(x) {
				return path
			}
			v = x[i]
		default:
			return append(path, "0")
		}
	}
	return path
}

// randomValueText returns the text of the value at path, re-spelled, or
// another value.
func randomValueText(r *rand.Rand, v any, path []string) string {
	for _, p := range path {
		switch x := v.(type) {
		case map[string]any:
			v = x[p]
		case []any:
			i, _ := strconv.Atoi(p)
			if i >= len(x) {
				return "1"
			}
			v = x[i]
		}
	}
	if r.IntN(3) == 0 {
		v = randomJSON(r, 1)
	}
	switch x := v.(type) {
	case string:
		if r.IntN(2) == 0 && !json.Valid([]byte(x)) {
			return x
		}
	case json.Number:
		if r.IntN(2) == 0 {
			f, _ := x.Float64()
			return strconv.FormatFloat(f, 'g', -1, 64)
		}
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// BenchmarkArgsMatch times the args part of a search over one call's
// default scan (10,000 jobs, the args of a typical job of about 250
// bytes): the raw walk that JobSearch uses, against decoding each job's
// args whole. docs/benchmarks.md has the figures beside a whole search's.
//
//	go test -run '^$' -bench ArgsMatch -count 6 .
func BenchmarkArgsMatch(b *testing.B) {
	docs := make([][]byte, defaultScanMax)
	for i := range docs {
		docs[i] = fmt.Appendf(nil, `{"user":{"id":%d,"email":"user%d@example.com","plan":"pro"},"order":{"id":"ord_%08d","items":[{"sku":"A-%d","qty":2},{"sku":"B-7","qty":1}],"total":129.5},"notify":true,"locale":"en-GB","source":"checkout"}`, i, i, i, i%97)
	}
	path := []string{"order", "items", "0", "sku"}
	want, err := canonicalValue("A-42")
	if err != nil {
		b.Fatal(err)
	}
	for _, m := range []struct {
		name  string
		match func([]byte, []string, any) bool
	}{{"raw", rawMatch}, {"decoded", decodedMatch}} {
		b.Run(m.name, func(b *testing.B) {
			for b.Loop() {
				n := 0
				for _, d := range docs {
					if m.match(d, path, want) {
						n++
					}
				}
				if want := (defaultScanMax-1-42)/97 + 1; n != want {
					b.Fatalf("%d matches, want %d", n, want)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/scan")
		})
	}
}
