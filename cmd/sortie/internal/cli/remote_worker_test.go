package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The Python worker of examples/remote-worker, built on the client in
// clients/python (whose own tests make test-python runs), runs jobs through
// sortie serve: each word count completes with its result, a job with bad
// args is discarded with the worker's error, and nothing is left claimed.
func TestPythonRemoteWorker(t *testing.T) {
	t.Parallel()
	python, err := exec.LookPath("python3")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("python3 is not installed: the remote-worker example cannot be tested")
		}
		t.Skip("SKIPPED: python3 is not installed, so the Python remote worker is not tested")
	}
	r := startServe(t, "--store", filepath.Join(t.TempDir(), "jobs.db"))
	texts := map[int64]string{}
	for i := range 20 {
		text := strings.Repeat("word ", i+1)
		code, out := post(t, r.base+"/jobs", fmt.Sprintf(`{"kind": "word.count", "queue": "text", "args": {"text": %q}}`, text))
		if code != http.StatusCreated {
			t.Fatalf("enqueue: %d %v", code, out)
		}
		texts[int64(out["id"].(float64))] = text
	}
	_, bad := post(t, r.base+"/jobs", `{"kind": "word.count", "queue": "text", "args": {"text": 42}}`)
	_, long := post(t, r.base+"/jobs", `{"kind": "sleep", "queue": "text", "args": {"seconds": 0.3}}`)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, python, "../../../../examples/remote-worker/worker.py", "--url", r.base, "--queue", "text", "--max-jobs", "22")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("worker.py: %v\n%s", err, out)
	}
	if n := strings.Count(string(out), "): completed"); n != 21 {
		t.Errorf("worker.py reported %d jobs completed, want 21:\n%s", n, out)
	}

	res, err := http.Get(r.base + "/jobs?queue=text&limit=100")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var page struct {
		Jobs []struct {
			ID     int64           `json:"id"`
			State  string          `json:"state"`
			Result json.RawMessage `json:"result"`
			Errors []struct {
				Message string `json:"message"`
			} `json:"errors"`
			AttemptedBy string `json:"attempted_by"`
		} `json:"jobs"`
	}
	if err := json.NewDecoder(res.Body).Decode(&page); err != nil {
		t.Fatal(err)
	}
	if len(page.Jobs) != 22 {
		t.Fatalf("%d jobs in queue text, want 22", len(page.Jobs))
	}
	for _, j := range page.Jobs {
		switch {
		case j.ID == int64(bad["id"].(float64)):
			if j.State != "cancelled" || len(j.Errors) != 1 || j.Errors[0].Message != "args.text must be a string" {
				t.Errorf("job with bad args: %s, errors %+v; want cancelled with the worker's message", j.State, j.Errors)
			}
		case j.ID == int64(long["id"].(float64)):
			if j.State != "completed" || string(j.Result) != `{"slept":0.3}` {
				t.Errorf("sleep job: %s, result %s", j.State, j.Result)
			}
		default:
			want := fmt.Sprintf(`{"words":%d}`, len(strings.Fields(texts[j.ID])))
			if j.State != "completed" || string(j.Result) != want || !strings.HasPrefix(j.AttemptedBy, "py-") {
				t.Errorf("job %d: %s, result %s, by %s; want completed, %s, by the Python worker", j.ID, j.State, j.Result, j.AttemptedBy, want)
			}
		}
	}
}
