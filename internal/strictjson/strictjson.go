// Package strictjson decodes JSON that comes from outside (HTTP request
// bodies, command-line flags) more strictly than encoding/json does, and
// says what is wrong in the JSON's own names:
//
//   - object keys match struct fields exactly: encoding/json would take
//     "Kind" for the field "kind", here it is an unknown field;
//   - a key given twice in one object is refused, anywhere in the document
//     (encoding/json keeps the last);
//   - every string, key and raw value is valid UTF-8 with no lone UTF-16
//     surrogate escape (encoding/json replaces both with U+FFFD in strings
//     and keeps them byte for byte in a json.RawMessage);
//   - a value of the wrong type is named by its path ("jobs[2].priority"),
//     never by a Go struct field;
//   - null is refused for a value that cannot be absent in Go (a string,
//     number, bool or struct): encoding/json takes it as "leave the field
//     as it is", so {"lease": null} would pass for a lease not given. It
//     is taken where Go can say "none": a pointer, slice or map (nil), and
//     where any JSON fits (json.RawMessage, any).
//
// Go 1.26's encoding/json/v2 does most of this, but only behind a
// GOEXPERIMENT, so sortie does not depend on it.
package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
)

// MaxDepth is how deeply arrays and objects may nest, as in encoding/json.
const MaxDepth = 10000

// Error is a problem with one value of a document: the value at Path (JSON
// names: "jobs[2].args.name"; empty for the whole document) and what is
// wrong with it ("is not valid UTF-8").
type Error struct {
	Path    string
	Problem string
}

// Error returns the path and the problem: "jobs[2].kind must be a string,
// got a number".
func (e *Error) Error() string { return e.Describe("the JSON value") }

// Describe returns the message with whole standing for the document when
// the problem is with the document itself: Describe("request body").
func (e *Error) Describe(whole string) string {
	if e.Path == "" {
		return whole + " " + e.Problem
	}
	return e.Path + " " + e.Problem
}

// SyntaxError is a document that is not JSON at all.
type SyntaxError struct {
	// Offset is the byte offset of the problem.
	Offset int64
	msg    string
}

// Error says what is wrong and where: "invalid character 'x' looking for
// beginning of value (at byte 3)".
func (e *SyntaxError) Error() string { return fmt.Sprintf("%s (at byte %d)", e.msg, e.Offset) }

// Unmarshal checks data as the package doc says against the type of v,
// then decodes it into v as json.Unmarshal does. A document that is not
// JSON returns a *SyntaxError; one that is JSON but breaks a rule returns
// an *Error, and v is left untouched.
func Unmarshal(data []byte, v any) error {
	t := reflect.TypeOf(v)
	if t == nil || t.Kind() != reflect.Pointer {
		return fmt.Errorf("strictjson: Unmarshal needs a pointer, got %T", v)
	}
	if err := check(data, schemaOf(t.Elem())); err != nil {
		return err
	}
	if err := json.Unmarshal(data, v); err != nil {
		// Not expected once the check passed; said without Go names.
		return &Error{Problem: "could not be decoded: " + plainDecodeError(err)}
	}
	return nil
}

// Check checks data as Unmarshal does, with no type to match: any JSON
// value whose keys are unique and whose text is valid Unicode.
func Check(data []byte) error { return check(data, anyNode) }

func check(data []byte, n *node) error {
	w := &walker{data: data, dec: json.NewDecoder(bytes.NewReader(data))}
	w.dec.UseNumber()
	if err := w.value(n, "", 0); err != nil {
		return err
	}
	if _, err := w.dec.Token(); !errors.Is(err, io.EOF) {
		return &Error{Problem: "has more after its JSON value"}
	}
	return nil
}

// plainDecodeError drops encoding/json's mention of Go types.
func plainDecodeError(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return fmt.Sprintf("a JSON %s at %s does not fit", te.Value, te.Field)
	}
	return strings.TrimPrefix(err.Error(), "json: ")
}

// ValidText reports whether data, a JSON text (valid JSON assumed), is
// valid UTF-8 and holds no lone surrogate escape such as "\ud800", which
// no UTF-8 text can represent. It reads data once and allocates nothing.
func ValidText(data []byte) error {
	if !utf8.Valid(data) {
		return errors.New("is not valid UTF-8")
	}
	return surrogates(data)
}

// surrogates finds an escaped lone surrogate in JSON text. Outside strings
// valid JSON has no backslash, so the text is read escape by escape
// without tracking strings.
func surrogates(data []byte) error {
	for i := bytes.IndexByte(data, '\\'); i >= 0; {
		if i+1 >= len(data) {
			return nil
		}
		if data[i+1] != 'u' {
			i = next(data, i+2)
			continue
		}
		r, ok := hex4(data, i+2)
		switch {
		case !ok:
			return nil // not JSON; the syntax check says so
		case r >= 0xDC00 && r <= 0xDFFF:
			return fmt.Errorf(`is not valid Unicode: \u%04x is the second half of a surrogate pair, with no first half`, r)
		case r >= 0xD800 && r <= 0xDBFF:
			low, ok := -1, i+8 < len(data) && data[i+6] == '\\' && data[i+7] == 'u'
			if ok {
				low, ok = hex4(data, i+8)
			}
			if !ok || low < 0xDC00 || low > 0xDFFF {
				return fmt.Errorf(`is not valid Unicode: \u%04x is the first half of a surrogate pair, with no second half`, r)
			}
			i = next(data, i+12)
		default:
			i = next(data, i+6)
		}
	}
	return nil
}

// next returns the index of the first backslash of data at or after from,
// or -1.
func next(data []byte, from int) int {
	if from >= len(data) {
		return -1
	}
	if j := bytes.IndexByte(data[from:], '\\'); j >= 0 {
		return from + j
	}
	return -1
}

// hex4 reads 4 hex digits at data[i:].
func hex4(data []byte, i int) (int, bool) {
	if i+4 > len(data) {
		return 0, false
	}
	v, err := strconv.ParseUint(string(data[i:i+4]), 16, 16)
	return int(v), err == nil
}

// walker reads a document token by token, checking each against a node.
type walker struct {
	data []byte
	dec  *json.Decoder
}

// token returns the next token and the raw bytes before it since the
// previous one (whitespace, a separator, and the token itself).
func (w *walker) token() (json.Token, []byte, error) {
	start := w.dec.InputOffset()
	tok, err := w.dec.Token()
	if err != nil {
		return nil, nil, w.syntax(err)
	}
	return tok, w.data[start:w.dec.InputOffset()], nil
}

func (w *walker) syntax(err error) error {
	var se *json.SyntaxError
	switch {
	case errors.As(err, &se):
		return &SyntaxError{Offset: se.Offset, msg: se.Error()}
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return &SyntaxError{Offset: int64(len(w.data)), msg: "it ends before its value does"}
	}
	return &SyntaxError{Offset: w.dec.InputOffset(), msg: err.Error()}
}

// value checks the next value, at path, against n.
func (w *walker) value(n *node, path string, depth int) error {
	tok, raw, err := w.token()
	if err != nil {
		return err
	}
	switch t := tok.(type) {
	case json.Delim:
		if depth >= MaxDepth {
			return &Error{Path: path, Problem: fmt.Sprintf("nests more than %d levels deep", MaxDepth)}
		}
		if t == '{' {
			return w.object(n, path, depth+1)
		}
		return w.array(n, path, depth+1)
	case string:
		if err := validString(raw); err != nil {
			return &Error{Path: path, Problem: err.Error()}
		}
		return n.accept(kString, path)
	case json.Number:
		return n.acceptNumber(t, path)
	case bool:
		return n.accept(kBool, path)
	case nil:
		if n.kind != kAny && !n.nullable {
			return &Error{Path: path, Problem: fmt.Sprintf("must be %s, got null (leave it out for its default)", kindNames[n.kind])}
		}
	}
	return nil
}

// object checks the members of an object whose '{' was read.
func (w *walker) object(n *node, path string, depth int) error {
	if err := n.accept(kObject, path); err != nil {
		return err
	}
	seen := map[string]struct{}{}
	for w.dec.More() {
		tok, raw, err := w.token()
		if err != nil {
			return err
		}
		key, _ := tok.(string)
		if err := validString(raw); err != nil {
			return &Error{Path: path, Problem: "has a key that " + err.Error()}
		}
		if _, dup := seen[key]; dup {
			return &Error{Path: path, Problem: fmt.Sprintf("has the key %s twice", quote(key))}
		}
		seen[key] = struct{}{}
		child, err := n.member(key, path)
		if err != nil {
			return err
		}
		if err := w.value(child, join(path, key), depth); err != nil {
			return err
		}
	}
	_, _, err := w.token() // '}'
	return err
}

// array checks the elements of an array whose '[' was read.
func (w *walker) array(n *node, path string, depth int) error {
	if err := n.accept(kArray, path); err != nil {
		return err
	}
	elem := n.elem
	if elem == nil {
		elem = anyNode
	}
	for i := 0; w.dec.More(); i++ {
		if err := w.value(elem, fmt.Sprintf("%s[%d]", path, i), depth); err != nil {
			return err
		}
	}
	_, _, err := w.token() // ']'
	return err
}

// validString checks the raw text of one string token, with whatever
// whitespace and separator came before it.
func validString(raw []byte) error {
	if i := bytes.IndexByte(raw, '"'); i >= 0 {
		raw = raw[i:]
	}
	return ValidText(raw)
}

// join returns the path of key in the object at path.
func join(path, key string) string {
	if simpleKey(key) {
		if path == "" {
			return key
		}
		return path + "." + key
	}
	return path + "[" + quote(key) + "]"
}

func simpleKey(key string) bool {
	if key == "" || len(key) > 64 {
		return false
	}
	for _, r := range key {
		if (r < 'a' || r > 'z') && (r < 'A' || r > 'Z') && (r < '0' || r > '9') && r != '_' && r != '-' {
			return false
		}
	}
	return true
}

// quote quotes a key for a message, cut short when long.
func quote(s string) string {
	const maxShown = 64
	if len(s) > maxShown {
		cut := maxShown
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		return strconv.Quote(s[:cut]) + fmt.Sprintf(" (cut from %d bytes)", len(s))
	}
	return strconv.Quote(s)
}

// kind is the JSON type a node accepts.
type kind int

const (
	kAny kind = iota
	kString
	kInteger
	kNumber
	kBool
	kArray
	kObject // a struct: known fields only
	kMap    // any keys
)

var kindNames = [...]string{kAny: "any value", kString: "a string", kInteger: "an integer", kNumber: "a number",
	kBool: "true or false", kArray: "an array", kObject: "an object", kMap: "an object"}

// node is what a Go type accepts as JSON.
type node struct {
	kind kind
	// min and max bound an integer.
	min, max int64
	// elem is the node of an array's elements or a map's values.
	elem *node
	// fields are a struct's members by exact JSON name.
	fields map[string]*node
	// nullable accepts null: a pointer, slice or map.
	nullable bool
}

var anyNode = &node{kind: kAny}

// accept checks that a value of JSON type got fits n.
func (n *node) accept(got kind, path string) error {
	want := n.kind
	switch {
	case want == kAny, got == want, got == kObject && want == kMap:
		return nil
	}
	return &Error{Path: path, Problem: fmt.Sprintf("must be %s, got %s", kindNames[want], kindNames[got])}
}

// acceptNumber checks a number against n: in range for an integer.
func (n *node) acceptNumber(num json.Number, path string) error {
	switch n.kind {
	case kAny:
		return nil
	case kNumber:
		if f, err := num.Float64(); err != nil || math.IsInf(f, 0) {
			return &Error{Path: path, Problem: fmt.Sprintf("must be a number within ±%g, got %s", math.MaxFloat64, short(num))}
		}
		return nil
	case kInteger:
		i, err := strconv.ParseInt(string(num), 10, 64)
		if err != nil || i < n.min || i > n.max {
			return &Error{Path: path, Problem: fmt.Sprintf("must be an integer from %d to %d, got %s", n.min, n.max, short(num))}
		}
		return nil
	}
	return n.accept(kNumber, path)
}

// short cuts a long number for a message.
func short(num json.Number) string {
	if s := string(num); len(s) <= 32 {
		return s
	}
	return string(num[:32]) + "..."
}

// member returns the node of key in an object checked against n.
func (n *node) member(key, path string) (*node, error) {
	switch n.kind {
	case kObject:
		if f, ok := n.fields[key]; ok {
			return f, nil
		}
		problem := "has unknown field " + quote(key)
		for name := range n.fields {
			if strings.EqualFold(name, key) {
				problem += fmt.Sprintf(" (names are case-sensitive: did you mean %q?)", name)
				break
			}
		}
		return nil, &Error{Path: path, Problem: problem}
	case kMap:
		return n.elem, nil
	}
	return anyNode, nil
}

// schemas caches the node of each type.
var schemas sync.Map // reflect.Type -> *node

var rawMessage = reflect.TypeFor[json.RawMessage]()
var unmarshaler = reflect.TypeFor[json.Unmarshaler]()

// schemaOf returns the node of t.
func schemaOf(t reflect.Type) *node {
	if n, ok := schemas.Load(t); ok {
		return n.(*node)
	}
	n := build(t, map[reflect.Type]*node{})
	schemas.Store(t, n)
	return n
}

// build returns the node of t; building holds the nodes of the types being
// built, for recursive types.
func build(t reflect.Type, building map[reflect.Type]*node) *node {
	if n, ok := building[t]; ok {
		return n
	}
	if t == rawMessage || t.Implements(unmarshaler) || reflect.PointerTo(t).Implements(unmarshaler) {
		return anyNode // decodes itself: any JSON
	}
	switch t.Kind() {
	case reflect.Pointer:
		c := *build(t.Elem(), building)
		c.nullable = true
		return &c
	case reflect.String:
		return &node{kind: kString}
	case reflect.Bool:
		return &node{kind: kBool}
	case reflect.Int, reflect.Int64, reflect.Int32, reflect.Int16, reflect.Int8:
		return &node{kind: kInteger, min: -1 << (t.Bits() - 1), max: 1<<(t.Bits()-1) - 1}
	case reflect.Uint, reflect.Uint64:
		return &node{kind: kInteger, min: 0, max: math.MaxInt64}
	case reflect.Uint32, reflect.Uint16, reflect.Uint8:
		return &node{kind: kInteger, min: 0, max: 1<<t.Bits() - 1}
	case reflect.Float32, reflect.Float64:
		return &node{kind: kNumber}
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 {
			return &node{kind: kString} // base64
		}
		n := &node{kind: kArray, nullable: t.Kind() == reflect.Slice}
		building[t] = n
		n.elem = build(t.Elem(), building)
		return n
	case reflect.Map:
		n := &node{kind: kMap, nullable: true}
		building[t] = n
		n.elem = build(t.Elem(), building)
		return n
	case reflect.Struct:
		n := &node{kind: kObject, fields: map[string]*node{}}
		building[t] = n
		addFields(n, t, building)
		return n
	}
	return anyNode
}

// addFields adds t's fields to n as encoding/json names them, with the
// fields of embedded structs promoted.
func addFields(n *node, t reflect.Type, building map[reflect.Type]*node) {
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		ft := f.Type
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if f.Anonymous && name == "" && ft.Kind() == reflect.Struct {
			addFields(n, ft, building)
			continue
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		n.fields[name] = build(f.Type, building)
	}
}
