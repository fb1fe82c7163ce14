package web_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sortiehq/sortie/auth"
	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/web"
)

// Every page of the dashboard over a few hundred jobs in every state, in
// Chromium at 1400 and 390 px wide (and 1280 for the width check): none
// scrolls sideways, axe-core finds no serious or critical accessibility
// violation, the console shows no error, and each is saved as a
// screenshot (into $SORTIE_SCREENSHOTS when set, else a temporary
// directory: `make screenshots` refreshes those of docs/).
func TestEveryPageInBrowser(t *testing.T) {
	t.Parallel()
	b := startBrowser(t)
	axe := axeSource(t)
	s := newSite(t, &web.Options{Refresh: -1})
	ids := seed(t, s)
	pages := []struct{ name, path string }{
		{"overview", "/"},
		{"queue", "/queues/mail"},
		{"jobs", "/jobs"},
		{"dead", "/jobs?state=dead"},
		{"scheduled", "/jobs?state=scheduled"},
		{"search", "/jobs?queue=billing&error=declined"},
		{"job-dead", fmt.Sprintf("/jobs/%d", ids.dead)},
		{"job-workflow", fmt.Sprintf("/jobs/%d", ids.inWorkflow)},
		{"job-cancelled", fmt.Sprintf("/jobs/%d", ids.cancelledDependent)},
		{"job-steps", fmt.Sprintf("/jobs/%d", ids.withSteps)},
		{"running", "/busy"},
		{"processes", "/processes"},
		{"periodic", "/periodic"},
		{"not-found", "/jobs/999999"},
	}
	dir := os.Getenv("SORTIE_SCREENSHOTS")
	if dir == "" {
		dir = t.TempDir()
	}
	for _, p := range pages {
		for _, width := range []int{1400, 1280, 390} {
			ids.beat()
			b.resize(width, 900)
			b.open(s.url + p.path)
			b.must("main")
			b.allow = ""
			if p.name == "not-found" {
				b.allow = p.path + " - Failed to load resource: the server responded with a status of 404"
			}
			b.checkPage(fmt.Sprintf("%s at %d px", p.path, width), width, axe)
			if width != 1280 {
				b.screenshot(filepath.Join(dir, fmt.Sprintf("%s-%d.png", p.name, width)))
			}
		}
	}
	// A confirm page, reached as a person does: a Delete button.
	for _, width := range []int{1400, 390} {
		b.resize(width, 900)
		b.open(s.url + fmt.Sprintf("/jobs/%d", ids.dead))
		b.click("#delete")
		b.waitText("h1", fmt.Sprintf("Delete job %d?", ids.dead))
		b.checkPage(fmt.Sprintf("the confirm page at %d px", width), width, axe)
		b.screenshot(filepath.Join(dir, fmt.Sprintf("confirm-%d.png", width)))
	}
	if _, err := s.st.JobGet(context.Background(), &store.JobGetParams{ID: ids.dead}); err != nil {
		t.Errorf("job %d after pressing Delete without confirming: %v, want it there", ids.dead, err)
	}
	// The sign-in page, and what a read-only token sees: no buttons.
	signed := newSite(t, &web.Options{Refresh: -1, Keyring: auth.NewKeyring([]auth.Token{{Name: "viewer", Secret: "look-only-0123456789",
		Scopes: []auth.Scope{auth.ScopeRead}}})})
	dead := signed.enqueue(t, "email.send", "mail")
	signed.kill(t, "mail", dead, "smtp: 550 mailbox unavailable")
	for _, width := range []int{1400, 390} {
		b.resize(width, 900)
		b.open(signed.url + "/")
		b.waitText("h1", "Sign in")
		b.checkPage(fmt.Sprintf("the sign-in page at %d px", width), width, axe)
		if b.find("nav.sections") != "" || b.find("form.signout") != "" {
			t.Errorf("the sign-in page shows the nav or Sign out")
		}
		b.screenshot(filepath.Join(dir, fmt.Sprintf("login-%d.png", width)))
	}
	b.typeInto("#token", "look-only-0123456789")
	b.click("form.login button")
	b.waitText("h1", "Overview")
	for _, path := range []string{"/", "/jobs?state=dead", fmt.Sprintf("/jobs/%d", dead), "/processes"} {
		b.open(signed.url + path)
		b.must("main")
		if n := b.count("main form[method=post] button"); n != 0 {
			t.Errorf("a read-only session sees %d action buttons on %s, want none", n, path)
		}
	}
	t.Logf("screenshots in %s", dir)
}

// A live refresh updates the page in place and leaves alone what the user
// is doing: a filter half typed, rows ticked.
func TestLiveRefreshKeepsWhatTheUserDoes(t *testing.T) {
	t.Parallel()
	b := startBrowser(t)
	s := newSite(t, &web.Options{Refresh: time.Second})
	var dead []int64
	for i := range 4 {
		id := s.enqueue(t, "email.send", "mail")
		s.kill(t, "mail", id, fmt.Sprintf("smtp: 550 mailbox %d unavailable", i))
		dead = append(dead, id)
	}
	b.open(s.url + "/jobs?state=dead")
	b.waitText(`#tabs a[aria-current="page"] .n`, "4")
	b.click(fmt.Sprintf(`tr[data-id="%d"] input[type=checkbox]`, dead[0]))
	b.click(fmt.Sprintf(`tr[data-id="%d"] input[type=checkbox]`, dead[2]))
	b.typeInto(`#filters input[name="error"]`, "mailbox 2")

	// The store changes: a fifth dead job. The tabs show it at the next
	// refresh; the list, with rows ticked, waits.
	fifth := s.enqueue(t, "email.send", "mail")
	s.kill(t, "mail", fifth, "smtp: 421 try later")
	b.waitText(`#tabs a[aria-current="page"] .n`, "5")
	b.waitText("#live-status", "the list waits while rows are ticked")
	if v := b.value(`#filters input[name="error"]`); v != "mailbox 2" {
		t.Errorf("the filter after a refresh reads %q, want the half-typed %q", v, "mailbox 2")
	}
	if !b.focused(`#filters input[name="error"]`) {
		t.Errorf("the filter lost the focus in a refresh")
	}
	for _, id := range dead {
		if got, want := b.checked(fmt.Sprintf(`tr[data-id="%d"] input[type=checkbox]`, id)), id == dead[0] || id == dead[2]; got != want {
			t.Errorf("row %d ticked %v after a refresh, want %v", id, got, want)
		}
	}
	b.waitText("#selected", "2 ticked rows")
	// Unticked, the list catches up.
	b.click(fmt.Sprintf(`tr[data-id="%d"] input[type=checkbox]`, dead[0]))
	b.click(fmt.Sprintf(`tr[data-id="%d"] input[type=checkbox]`, dead[2]))
	b.must(fmt.Sprintf(`tr[data-id="%d"]`, fifth))
	// Select-all ticks every row of the page.
	b.click("#select-all")
	b.waitText("#selected", "5 ticked rows")
	b.checkConsole("/jobs?state=dead")
}

// resize makes the page width px wide and height tall, as a phone's or a
// laptop's screen: the viewport itself, which a window cannot be made
// narrower than about 500 px.
func (b *browser) resize(width, height int) {
	b.t.Helper()
	b.cdp("Emulation.setDeviceMetricsOverride", map[string]any{"width": width, "height": height, "deviceScaleFactor": 1,
		"mobile": width < 500}, nil)
}

// cdp sends a Chrome DevTools Protocol command through chromedriver.
func (b *browser) cdp(cmd string, params map[string]any, out any) {
	b.t.Helper()
	b.call("POST", "/goog/cdp/execute", map[string]any{"cmd": cmd, "params": params}, out)
}

// screenshot saves the page to path: its whole width and its first 1,600
// px, which is what a reader of the screenshots looks at.
func (b *browser) screenshot(path string) {
	b.t.Helper()
	var size struct{ W, H float64 }
	b.exec(`return {W: document.documentElement.scrollWidth, H: document.documentElement.scrollHeight}`, &size)
	var shot struct {
		Data string `json:"data"`
	}
	b.cdp("Page.captureScreenshot", map[string]any{"format": "png", "captureBeyondViewport": true,
		"clip": map[string]any{"x": 0, "y": 0, "width": size.W, "height": min(size.H, 1600), "scale": 1}}, &shot)
	png, err := base64.StdEncoding.DecodeString(shot.Data)
	if err != nil {
		b.t.Fatalf("screenshot %s: %v", path, err)
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
}

// exec runs script in the page with args and decodes its result into out.
func (b *browser) exec(script string, out any, args ...any) {
	b.t.Helper()
	if args == nil {
		args = []any{}
	}
	b.call("POST", "/execute/sync", map[string]any{"script": script, "args": args}, out)
}

func (b *browser) count(css string) int {
	var n int
	b.exec(`return document.querySelectorAll(arguments[0]).length`, &n, css)
	return n
}

func (b *browser) value(css string) string {
	var v string
	b.exec(`return document.querySelector(arguments[0]).value`, &v, css)
	return v
}

func (b *browser) checked(css string) bool {
	var v bool
	b.exec(`return document.querySelector(arguments[0]).checked`, &v, css)
	return v
}

func (b *browser) focused(css string) bool {
	var v bool
	b.exec(`return document.activeElement === document.querySelector(arguments[0])`, &v, css)
	return v
}

// checkPage checks the page open in b, width px wide: it does not scroll
// sideways, axe finds nothing serious or critical (at 1400 and 390 px),
// and the console has no error.
func (b *browser) checkPage(what string, width int, axe string) {
	b.t.Helper()
	var scroll int
	b.exec(`return document.documentElement.scrollWidth`, &scroll)
	if scroll > width {
		b.t.Errorf("%s scrolls sideways: %d px wide in a %d px window", what, scroll, width)
	}
	if width == 1280 {
		b.checkConsole(what)
		return // axe's findings at 1280 are those at 1400
	}
	var found []string
	args := map[string]any{"script": axe + `
		const done = arguments[arguments.length - 1];
		axe.run(document, {resultTypes: ["violations"]}).then((r) => done(r.violations
			.filter((v) => v.impact === "serious" || v.impact === "critical")
			.map((v) => v.impact + " " + v.id + ": " + v.help + " at " + v.nodes.slice(0, 3).map((n) => n.target.join(" ")).join(", "))),
			(e) => done(["axe failed: " + e]));`, "args": []any{}}
	b.call("POST", "/execute/async", args, &found)
	for _, f := range found {
		b.t.Errorf("%s: axe-core: %s", what, f)
	}
	b.checkConsole(what)
}

// checkConsole fails the test for each error the console shows since the
// last look, but the one b.allow names (an error page's own status).
func (b *browser) checkConsole(what string) {
	b.t.Helper()
	var logs []struct {
		Level, Message string
	}
	b.call("POST", "/se/log", map[string]string{"type": "browser"}, &logs)
	for _, l := range logs {
		if l.Level == "SEVERE" && (b.allow == "" || !strings.Contains(l.Message, b.allow)) {
			b.t.Errorf("%s: the console shows an error: %s", what, l.Message)
		}
	}
}

// axeSource returns axe-core's script, which scripts/testbrowser.sh
// installs with npm (it is MPL-2.0; the repository does not carry it):
// $SORTIE_AXE or the path that script prints. Missing, the test skips,
// except under CI=true.
func axeSource(t *testing.T) string {
	t.Helper()
	path := os.Getenv("SORTIE_AXE")
	if path == "" {
		cache, err := os.UserCacheDir()
		if err == nil {
			path = filepath.Join(cache, "sortie", "axe-core", "node_modules", "axe-core", "axe.min.js")
		}
	}
	src, err := os.ReadFile(path)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("axe-core is missing (%v): scripts/testbrowser.sh installs it", err)
		}
		t.Skipf("SKIPPED: axe-core is missing (%v), so the pages are not checked in a browser; scripts/testbrowser.sh installs it", err)
	}
	if !strings.Contains(string(src), "axe") {
		t.Fatalf("%s does not look like axe-core", path)
	}
	return string(src)
}
