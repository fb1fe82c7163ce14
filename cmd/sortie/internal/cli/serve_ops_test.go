package cli

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/sortiehq/sortie/internal/testkit"
)

// send makes a request with an optional bearer secret and returns the
// status and body.
func send(t *testing.T, c *http.Client, method, u, body, secret string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, u, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if secret != "" {
		req.Header.Set("Authorization", "Bearer "+secret)
	}
	if c == nil {
		c = http.DefaultClient
	}
	res, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

const (
	adminSecret   = "admin-secret-0123456789"
	readSecret    = "read-secret-0123456789"
	enqueueSecret = "enqueue-secret-0123456789"
	workSecret    = "work-secret-0123456789"
)

func writeTokens(t *testing.T, path, text string) {
	t.Helper()
	tmp := path + ".new"
	if err := os.WriteFile(tmp, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// Tokens carry scopes: each endpoint takes the scope it needs, a worker's
// token cannot delete, change settings or sign in to the dashboard.
func TestServeScopedTokens(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens")
	writeTokens(t, tokens, "# name scopes secret\nops admin "+adminSecret+"\ndash read "+readSecret+
		"\nbilling enqueue "+enqueueSecret+"\nworker-eu work "+workSecret+"\n")
	r := startServe(t, "--store", filepath.Join(dir, "jobs.db"), "--tokens-file", tokens)
	root := strings.TrimSuffix(r.base, "/api/v1")

	code, body := send(t, nil, "POST", r.base+"/jobs", `{"kind": "k", "queue": "q"}`, enqueueSecret)
	if code != http.StatusCreated {
		t.Fatalf("enqueue with the enqueue token: %d %s", code, body)
	}
	var job struct{ ID int64 }
	_ = json.Unmarshal([]byte(body), &job)
	id := jsonNumber(float64(job.ID))
	for _, c := range []struct {
		method, path, body, secret string
		want                       int
	}{
		{"GET", "/jobs", "", enqueueSecret, http.StatusForbidden},
		{"GET", "/jobs", "", readSecret, http.StatusOK},
		{"GET", "/jobs", "", workSecret, http.StatusForbidden},
		{"POST", "/jobs", `{"kind": "k"}`, readSecret, http.StatusForbidden},
		{"DELETE", "/jobs/" + id, "", workSecret, http.StatusForbidden},
		{"DELETE", "/jobs/" + id, "", readSecret, http.StatusForbidden},
		{"POST", "/queues/q/pause", "", workSecret, http.StatusForbidden},
		{"POST", "/fetch", `{"queue": "q"}`, readSecret, http.StatusForbidden},
		{"POST", "/fetch", `{"queue": "q"}`, workSecret, http.StatusOK},
		{"POST", "/queues/q/pause", "", adminSecret, http.StatusOK},
		{"GET", "/jobs/" + id, "", "wrong-secret-0123456789", http.StatusUnauthorized},
	} {
		code, body := send(t, nil, c.method, r.base+c.path, c.body, c.secret)
		if code != c.want {
			t.Errorf("%s %s with %.8s...: %d %s, want %d", c.method, c.path, c.secret, code, body, c.want)
		}
		if code == http.StatusForbidden && !strings.Contains(body, "scope") {
			t.Errorf("%s %s refused without naming the scope: %s", c.method, c.path, body)
		}
	}
	if code, body := send(t, nil, "GET", root+"/metrics", "", workSecret); code != http.StatusForbidden {
		t.Errorf("GET /metrics with a work token: %d %s, want 403", code, body)
	}
	if code, body := send(t, nil, "GET", root+"/metrics", "", readSecret); code != http.StatusOK || !strings.Contains(body, "sortie_queue_jobs") {
		t.Errorf("GET /metrics with a read token: %d, want 200 with sortie_queue_jobs:\n%.500s", code, body)
	}
	for secret, want := range map[string]bool{workSecret: false, enqueueSecret: false, readSecret: true} {
		if got := dashboardLogin(t, root, secret); got != want {
			t.Errorf("dashboard sign-in with %.8s...: %v, want %v", secret, got, want)
		}
	}
}

// dashboardLogin signs in to the dashboard with secret and reports whether
// the session it got shows the overview.
func dashboardLogin(t *testing.T, root, secret string) bool {
	t.Helper()
	jar := &cookieJar{cookies: map[string]*http.Cookie{}}
	c := &http.Client{Jar: jar}
	res, err := c.Get(root + "/login")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(res.Body)
	res.Body.Close()
	csrf := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindSubmatch(page)
	if csrf == nil {
		t.Fatalf("no csrf field on the login page:\n%s", page)
	}
	form := url.Values{"token": {secret}, "csrf": {string(csrf[1])}, "next": {"/"}}
	req, _ := http.NewRequest("POST", root+"/login", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", root)
	res, err = c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	return res.StatusCode == http.StatusOK && !strings.Contains(string(body), "Sign in") && res.Request.URL.Path == "/"
}

// cookieJar keeps every cookie for one host, enough for a test.
type cookieJar struct{ cookies map[string]*http.Cookie }

func (j *cookieJar) SetCookies(_ *url.URL, cs []*http.Cookie) {
	for _, c := range cs {
		j.cookies[c.Name] = c
	}
}

func (j *cookieJar) Cookies(*url.URL) []*http.Cookie {
	var out []*http.Cookie
	for _, c := range j.cookies {
		if c.MaxAge >= 0 {
			out = append(out, c)
		}
	}
	return out
}

// A changed token file takes effect without a restart; a file that no
// longer parses keeps the tokens in use.
func TestServeRotatesTokens(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens")
	writeTokens(t, tokens, "billing enqueue "+enqueueSecret+"\n")
	r := startServe(t, "--store", filepath.Join(dir, "jobs.db"), "--tokens-file", tokens)
	if code, body := send(t, nil, "POST", r.base+"/jobs", `{"kind": "k"}`, enqueueSecret); code != http.StatusCreated {
		t.Fatalf("enqueue with the first secret: %d %s", code, body)
	}
	writeTokens(t, tokens, "billing enqueue rotated-secret-0123456789\n")
	waitFor(t, "the token file to be read again", func() bool {
		return strings.Contains(r.stderr.String(), "tokens reloaded")
	})
	if code, body := send(t, nil, "POST", r.base+"/jobs", `{"kind": "k"}`, "rotated-secret-0123456789"); code != http.StatusCreated {
		t.Errorf("enqueue with the rotated secret: %d %s", code, body)
	}
	if code, body := send(t, nil, "POST", r.base+"/jobs", `{"kind": "k"}`, enqueueSecret); code != http.StatusUnauthorized {
		t.Errorf("enqueue with the replaced secret: %d %s, want 401", code, body)
	}
	writeTokens(t, tokens, "billing nonsense rotated-secret-0123456789\n")
	waitFor(t, "the bad file to be logged", func() bool {
		return strings.Contains(r.stderr.String(), "tokens not reloaded")
	})
	if !strings.Contains(r.stderr.String(), `unknown scope \"nonsense\"`) {
		t.Errorf("the log does not say what is wrong with the file:\n%s", r.stderr)
	}
	if code, body := send(t, nil, "POST", r.base+"/jobs", `{"kind": "k"}`, "rotated-secret-0123456789"); code != http.StatusCreated {
		t.Errorf("enqueue after a bad file: %d %s, want the tokens in use kept", code, body)
	}
}

// waitFor polls cond until it holds, failing after 15 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testkit.WaitFor(t, 15*time.Second, what, nil, nil, func() (bool, error) { return cond(), nil })
}

// Bad token files and flags are refused at start, naming the problem.
func TestServeRefusesBadTokenSetup(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	open := filepath.Join(dir, "open")
	if err := os.WriteFile(open, []byte("ops admin "+adminSecret+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	short := filepath.Join(dir, "short")
	writeTokens(t, short, "ops admin abc\n")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--tokens-file", open}, "lets other users read it; chmod 600"},
		{[]string{"--tokens-file", short}, `token "ops": secret is 3 bytes, want at least 16`},
		{[]string{"--tokens-file", filepath.Join(dir, "missing")}, "no such file"},
		{[]string{"--tls-cert", "x.pem"}, "--tls-cert and --tls-key go together"},
		{[]string{"--log-format", "xml"}, "--log-format must be text or json"},
		{[]string{"--log-level", "loud"}, "--log-level must be debug, info, warn or error"},
		{[]string{"--tls-cert", filepath.Join(dir, "none.pem"), "--tls-key", filepath.Join(dir, "none.key")}, "--tls-cert"},
	} {
		code, _, stderr := run(t, append([]string{"serve", "--store", filepath.Join(dir, "jobs.db"), "--addr", "127.0.0.1:0"}, c.args...)...)
		if code != exitUsage || !strings.Contains(stderr, c.want) {
			t.Errorf("serve %q: exit %d, stderr %q; want 2 and %q", c.args, code, stderr, c.want)
		}
	}
}

// An address that keeps sending refused tokens gets 429 with Retry-After,
// and its tokens are not looked at until then.
func TestServeThrottlesBadTokens(t *testing.T) {
	t.Parallel()
	r := startServe(t, "--store", filepath.Join(t.TempDir(), "jobs.db"), "--token", adminSecret)
	for i := range 10 {
		if code, body := send(t, nil, "GET", r.base+"/jobs", "", "guess-"+jsonNumber(float64(i))); code != http.StatusUnauthorized {
			t.Fatalf("guess %d: %d %s, want 401", i, code, body)
		}
	}
	req, _ := http.NewRequest("GET", r.base+"/jobs", nil)
	req.Header.Set("Authorization", "Bearer "+adminSecret)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusTooManyRequests || res.Header.Get("Retry-After") == "" || !strings.Contains(string(body), "try again in") {
		t.Errorf("request after 10 refused tokens: %d, Retry-After %q, %s; want 429 with Retry-After", res.StatusCode, res.Header.Get("Retry-After"), body)
	}
}

// --tls-cert and --tls-key serve HTTPS.
func TestServeTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	certFile, keyFile, pool := selfSigned(t, dir)
	r := startServe(t, "--store", filepath.Join(dir, "jobs.db"), "--tls-cert", certFile, "--tls-key", keyFile)
	if !strings.HasPrefix(r.base, "https://") {
		t.Fatalf("serve with TLS listens on %s, want https", r.base)
	}
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	if code, body := send(t, c, "POST", r.base+"/jobs", `{"kind": "k"}`, ""); code != http.StatusCreated {
		t.Errorf("enqueue over HTTPS: %d %s", code, body)
	}
	plain := strings.Replace(r.base, "https://", "http://", 1)
	if res, err := http.Get(plain + "/health"); err == nil {
		res.Body.Close()
		if res.StatusCode < 400 {
			t.Errorf("plain HTTP to the TLS port answered %d", res.StatusCode)
		}
	}
}

// selfSigned writes a certificate for 127.0.0.1 and its key, and returns
// their files and a pool trusting it.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "sortie test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

// --log-format json writes a JSON line per request and per job a remote
// worker starts and finishes; --metrics-addr serves /metrics apart.
func TestServeLogsAndMetricsAddr(t *testing.T) {
	t.Parallel()
	r := startServe(t, "--store", filepath.Join(t.TempDir(), "jobs.db"), "--log-format", "json", "--metrics-addr", "127.0.0.1:0")
	// serve says where the metrics are just after where the API is, which
	// startServe waited for: the line may not be written yet.
	metricsLine := regexp.MustCompile(`metrics on (http://\S+/metrics)`)
	var m []string
	timeout := time.After(10 * time.Second)
	for {
		out, written := r.stdout.next()
		if m = metricsLine.FindStringSubmatch(out); m != nil {
			break
		}
		select {
		case <-written:
		case <-timeout:
			t.Fatalf("serve did not say where the metrics are: %q", r.stdout)
		}
	}
	if code, body := send(t, nil, "GET", m[1], "", ""); code != http.StatusOK || !strings.Contains(body, "go_goroutines") {
		t.Errorf("GET %s: %d %.300s", m[1], code, body)
	}
	root := strings.TrimSuffix(r.base, "/api/v1")
	if code, _ := send(t, nil, "GET", root+"/metrics", "", ""); code == http.StatusOK {
		t.Errorf("/metrics is also on the API's address with --metrics-addr")
	}
	send(t, nil, "POST", r.base+"/jobs", `{"kind": "k", "queue": "logs"}`, "")
	_, body := send(t, nil, "POST", r.base+"/fetch", `{"queue": "logs"}`, "")
	var got struct {
		Jobs []struct {
			ID         int64 `json:"id"`
			ClaimToken int64 `json:"claim_token"`
		}
	}
	if err := json.Unmarshal([]byte(body), &got); err != nil || len(got.Jobs) != 1 {
		t.Fatalf("fetch: %s", body)
	}
	send(t, nil, "POST", r.base+"/jobs/"+jsonNumber(float64(got.Jobs[0].ID))+"/complete",
		`{"claim_token": `+jsonNumber(float64(got.Jobs[0].ClaimToken))+`}`, "")
	waitFor(t, "the job lines", func() bool { return strings.Contains(r.stderr.String(), `"job finished"`) })
	// The remote worker's finish is counted, in a scrape that parses
	// (gzipped, as the Go client asks by default).
	_, scraped := send(t, nil, "GET", m[1], "", "")
	parser := expfmt.NewTextParser(model.LegacyValidation)
	mfs, err := parser.TextToMetricFamilies(strings.NewReader(scraped))
	if err != nil {
		t.Fatalf("GET %s: %v", m[1], err)
	}
	if fin := mfs["sortie_jobs_finished_total"].GetMetric(); len(fin) != 1 || fin[0].GetCounter().GetValue() != 1 {
		t.Errorf("sortie_jobs_finished_total = %v, want one series at 1", fin)
	}
	if up := mfs["sortie_store_up"].GetMetric(); mfs["go_goroutines"] == nil || len(up) != 1 || up[0].GetGauge().GetValue() != 1 {
		t.Errorf("scrape lacks go_goroutines or sortie_store_up 1:\n%.1000s", scraped)
	}
	seen := map[string]map[string]any{}
	sc := bufio.NewScanner(strings.NewReader(r.stderr.String()))
	for sc.Scan() {
		var line map[string]any
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Errorf("log line is not JSON: %q", sc.Text())
			continue
		}
		key, _ := line["msg"].(string)
		if route, ok := line["route"].(string); ok {
			key += " " + route
		}
		seen[key] = line
	}
	if l := seen["http request POST /api/v1/jobs"]; l == nil || l["status"] != float64(201) || l["duration_ms"] == nil {
		t.Errorf("no request line for the enqueue with status 201 and duration: %v", seen)
	}
	if l := seen["job started"]; l == nil || l["job_id"] != float64(got.Jobs[0].ID) || l["queue"] != "logs" || l["attempt"] != float64(1) {
		t.Errorf("job started line = %v", l)
	}
	if l := seen["job finished"]; l == nil || l["outcome"] != "completed" || l["state"] != "completed" {
		t.Errorf("job finished line = %v", l)
	}
}
