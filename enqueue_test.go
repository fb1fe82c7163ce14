package sortie_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/store/memstore"
)

// rawJob is args given as JSON text, as a program without Go types for
// them (the command line, the HTTP API) enqueues them.
type rawJob struct{ kind, json string }

func (r rawJob) Kind() string                 { return r.kind }
func (r rawJob) MarshalJSON() ([]byte, error) { return []byte(r.json), nil }

// Text a job would store that is not valid UTF-8 is refused, wherever it
// is: a worker in another language could not read it back, and PostgreSQL
// refuses it.
func TestEnqueueRefusesInvalidUTF8(t *testing.T) {
	t.Parallel()
	c := newClient(t, memstore.New(), &sortie.Config{})
	ctx := context.Background()
	for _, tt := range []struct {
		name string
		args sortie.JobArgs
		opts *sortie.EnqueueOpts
		want string
	}{
		{"kind", rawJob{"k\xff", `{}`}, nil, `kind "k\xff" is not valid UTF-8`},
		{"raw args", rawJob{"k", "{\"to\": \"ada\xc3\x28\"}"}, nil, `args of kind "k": their JSON is not valid UTF-8`},
		{"raw args with a lone surrogate", rawJob{"k", `{"to": "\ud800"}`}, nil, `args of kind "k": their JSON is not valid Unicode: \ud800`},
		{"unique key", Msg{}, &sortie.EnqueueOpts{UniqueKey: "u\xff"}, "EnqueueOpts.UniqueKey of kind \"msg\" is not valid UTF-8"},
		{"tag", Msg{}, &sortie.EnqueueOpts{Tags: []string{"ok", "t\xfe"}}, `EnqueueOpts.Tags of kind "msg" tag "t\xfe" is not valid UTF-8`},
		{"partition key", Msg{}, &sortie.EnqueueOpts{PartitionKey: "p\xff"}, `PartitionKey of kind "msg" is not valid UTF-8`},
		{"raw meta", Msg{}, &sortie.EnqueueOpts{Meta: map[string]any{"m": json.RawMessage("\"\xff\"")}}, `EnqueueOpts.Meta of kind "msg": its JSON is not valid UTF-8`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := c.Enqueue(ctx, tt.args, tt.opts)
			if !errors.Is(err, sortie.ErrInvalidArgument) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Enqueue() error = %v, want ErrInvalidArgument containing %q", err, tt.want)
			}
		})
	}
	_, err := c.EnqueueMany(ctx, []sortie.EnqueueParams{{Args: rawJob{"k", `{}`}}, {Args: rawJob{"k", "[\"\xff\"]"}}})
	if !errors.Is(err, sortie.ErrInvalidArgument) || !strings.Contains(err.Error(), "job 2 of 2") {
		t.Fatalf("EnqueueMany with invalid UTF-8 in job 2 = %v, want ErrInvalidArgument naming job 2 of 2", err)
	}
	// Valid text of every script, and surrogate pairs, are fine.
	if _, err := c.Enqueue(ctx, rawJob{"名前", `{"s": "é ü \ud83d\ude00 😀"}`}, &sortie.EnqueueOpts{Tags: []string{"ü"}, UniqueKey: "ключ"}); err != nil {
		t.Fatalf("Enqueue of valid UTF-8 = %v", err)
	}
	page, err := c.JobList(ctx, nil)
	if err != nil || len(page.Jobs) != 1 {
		t.Fatalf("after the refused enqueues: %d jobs stored, %v; want only the valid one", len(page.Jobs), err)
	}
}
