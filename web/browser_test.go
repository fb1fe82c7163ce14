package web_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/web"
)

// The dashboard in a real browser: headless Chromium driven through
// chromedriver's WebDriver protocol (plain HTTP and JSON, so no client
// library). An operator signs in, pauses a queue, finds a dead job and
// retries it; each step is checked in the page and in the store.
func TestInBrowser(t *testing.T) {
	t.Parallel()
	b := startBrowser(t)

	s := newSite(t, &web.Options{Tokens: []string{"s3cret"}})
	dead := s.enqueue(t, "email.send", "mail")
	s.kill(t, "mail", dead, "smtp: 550 mailbox unavailable")

	b.open(s.url + "/")
	b.waitText("h1", "Sign in")
	b.typeInto(`input[name="token"]`, "s3cret")
	b.click(`form.login button`)
	b.waitText("h1", "Overview")
	// The live refresh swaps the queues' table every few seconds; one
	// between finding a button and clicking it would fail the click on a
	// slow machine. Turn it off the way an operator does, with the
	// header's switch.
	b.click(`a#live`)
	b.waitText("a#live", "Paused")

	b.click(`tr[data-queue="mail"] form button`)
	b.waitText(".flash", "Queue mail paused.")
	if q, err := s.c.QueueGet(context.Background(), "mail"); err != nil || !q.Paused {
		t.Errorf("queue mail after clicking Pause: %+v, %v; want paused", q, err)
	}

	b.click(`nav a[href="/jobs?state=dead"]`)
	b.waitText(fmt.Sprintf(`tr[data-id="%d"] td.error`, dead), "smtp: 550 mailbox unavailable")
	b.click(fmt.Sprintf(`tr[data-id="%d"] a`, dead))
	b.waitText("h1", fmt.Sprintf("Job %d", dead))
	b.click("#retry")
	b.waitText(".flash", "Retried: now available.")
	row, err := s.st.JobGet(context.Background(), &store.JobGetParams{ID: dead})
	if err != nil || row.State != store.JobStateAvailable || row.MaxAttempts != 2 {
		t.Errorf("job after clicking Retry: %+v, %v; want available with one more attempt", row, err)
	}
}

// browser is one WebDriver session.
type browser struct {
	t       *testing.T
	base    string // http://127.0.0.1:PORT/session/ID
	timeout time.Duration
	// allow is a console error checkConsole expects: part of its text.
	allow string
}

// startBrowser starts chromedriver and a headless Chromium session, both
// ended when t ends. Without them it skips, except under CI=true, where
// `make test` installs them (scripts/testbrowser.sh).
func startBrowser(t *testing.T) *browser {
	t.Helper()
	chromium, err1 := findCommand("chromium", "chromium-browser", "google-chrome")
	driver, err2 := findCommand("chromedriver")
	if err1 != nil || err2 != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("the dashboard's browser test needs Chromium and chromedriver (%v, %v): scripts/testbrowser.sh installs them", err1, err2)
		}
		t.Skipf("SKIPPED: no Chromium or chromedriver here (%v, %v), so the dashboard is not tested in a browser; scripts/testbrowser.sh installs them", err1, err2)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	cmd := exec.Command(driver, fmt.Sprintf("--port=%d", port))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	// chromedriver says so on its output once it listens.
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		started := false
		for sc.Scan() {
			if !started && strings.Contains(sc.Text(), "started successfully") {
				started = true
				ready <- true
			}
		}
		if !started {
			ready <- false
		}
	}()
	select {
	case ok := <-ready:
		if !ok {
			t.Fatalf("chromedriver exited before it listened:\n%s", logs.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("chromedriver did not listen within 20s:\n%s", logs.String())
	}
	root := fmt.Sprintf("http://127.0.0.1:%d", port)
	var session struct {
		SessionID string `json:"sessionId"`
	}
	b := &browser{t: t, base: root + "/session", timeout: 15 * time.Second}
	b.call("POST", "", map[string]any{"capabilities": map[string]any{"alwaysMatch": map[string]any{
		"browserName": "chrome",
		"goog:chromeOptions": map[string]any{"binary": chromium,
			"args": []string{"--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,900",
				"--hide-scrollbars", "--font-render-hinting=none"}},
		// The console's messages, for consoleErrors.
		"goog:loggingPrefs": map[string]string{"browser": "ALL"},
	}}}, &session)
	b.base += "/" + session.SessionID
	t.Cleanup(func() { b.call("DELETE", "", nil, nil) })
	// A wait script gets b.timeout and a little more before WebDriver
	// gives up on it; axe-core, over a long page on a loaded machine
	// (under -race, beside other tests), up to two minutes.
	b.call("POST", "/timeouts", map[string]any{"script": max(b.timeout+5*time.Second, 2*time.Minute).Milliseconds()}, nil)
	return b
}

func findCommand(names ...string) (string, error) {
	for _, n := range names {
		if p, err := exec.LookPath(n); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found", strings.Join(names, " or "))
}

// call sends one WebDriver command and decodes its "value" into out.
func (b *browser) call(method, path string, body, out any) {
	b.t.Helper()
	if err := b.try(method, path, body, out); err != nil {
		b.t.Fatal(err)
	}
}

// try sends one WebDriver command and decodes its "value" into out, or
// returns what went wrong.
func (b *browser) try(method, path string, body, out any) error {
	var in bytes.Buffer
	if body != nil {
		_ = json.NewEncoder(&in).Encode(body)
	}
	req, _ := http.NewRequest(method, b.base+path, &in)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("webdriver %s %s: %w", method, path, err)
	}
	defer res.Body.Close()
	var reply struct {
		Value json.RawMessage `json:"value"`
	}
	if err := json.NewDecoder(res.Body).Decode(&reply); err != nil {
		return fmt.Errorf("webdriver %s %s: %w", method, path, err)
	}
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("webdriver %s %s: %d %s", method, path, res.StatusCode, reply.Value)
	}
	if out != nil {
		if err := json.Unmarshal(reply.Value, out); err != nil {
			return fmt.Errorf("webdriver %s %s: %w in %s", method, path, err, reply.Value)
		}
	}
	return nil
}

// waitScript, run by WebDriver's execute/async, answers true once an
// element matches the CSS selector arguments[0] and its text contains
// arguments[1], watching the page's changes rather than polling, or false
// after arguments[2] milliseconds.
const waitScript = `
const [css, text, ms, done] = arguments;
const ok = () => {
	const e = document.querySelector(css);
	return e !== null && e.textContent.includes(text);
};
if (ok()) {
	done(true);
	return;
}
const obs = new MutationObserver(() => {
	if (ok()) {
		obs.disconnect();
		clearTimeout(timer);
		done(true);
	}
});
const timer = setTimeout(() => { obs.disconnect(); done(false); }, ms);
obs.observe(document, {subtree: true, childList: true, characterData: true});
`

// waitFor waits until an element matches css and its text contains text,
// up to b.timeout, and reports whether one did. A page that navigates away
// while the script waits ends the script; it runs again on the new page.
func (b *browser) waitFor(css, text string) bool {
	b.t.Helper()
	args := map[string]any{"script": waitScript, "args": []any{css, text, b.timeout.Milliseconds()}}
	var err error
	for range 5 {
		var found bool
		if err = b.try("POST", "/execute/async", args, &found); err == nil {
			return found
		}
	}
	b.t.Fatalf("waiting for %s: %v", css, err)
	return false
}

func (b *browser) open(url string) { b.call("POST", "/url", map[string]string{"url": url}, nil) }

// find returns the element matching css, or "" when there is none.
func (b *browser) find(css string) string {
	b.t.Helper()
	var found []map[string]string
	b.call("POST", "/elements", map[string]string{"using": "css selector", "value": css}, &found)
	if len(found) == 0 {
		return ""
	}
	for _, id := range found[0] {
		return id
	}
	return ""
}

// must waits for an element matching css.
func (b *browser) must(css string) string {
	b.t.Helper()
	if b.waitFor(css, "") {
		if id := b.find(css); id != "" {
			return id
		}
	}
	var title string
	b.call("GET", "/title", nil, &title)
	var src string
	b.call("GET", "/source", nil, &src)
	b.t.Fatalf("no %s on the page %q after %s:\n%s", css, title, b.timeout, src)
	return ""
}

// click clicks the element matching css, finding it again when a live
// refresh replaced it between finding and clicking.
func (b *browser) click(css string) {
	b.t.Helper()
	var err error
	for range 5 {
		if err = b.try("POST", "/element/"+b.must(css)+"/click", map[string]any{}, nil); err == nil || !strings.Contains(err.Error(), "stale element") {
			break
		}
	}
	if err != nil {
		b.t.Fatal(err)
	}
}

func (b *browser) typeInto(css, text string) {
	b.t.Helper()
	b.call("POST", "/element/"+b.must(css)+"/value", map[string]string{"text": text}, nil)
}

// waitText waits until the element matching css shows text.
func (b *browser) waitText(css, text string) {
	b.t.Helper()
	if b.waitFor(css, text) {
		return
	}
	var got string
	if id := b.find(css); id != "" {
		b.call("GET", "/element/"+id+"/text", nil, &got)
	}
	var src string
	b.call("GET", "/source", nil, &src)
	b.t.Fatalf("%s shows %q after %s, want %q; the page:\n%s", css, got, b.timeout, text, src)
}
