package metrics_test

import (
	"bufio"
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/metrics"
	"github.com/sortiehq/sortie/store/memstore"
)

type Email struct {
	To string `json:"to"`
}

func (Email) Kind() string { return "email" }

// Expose a client's metrics on /metrics. A real program would pass
// prometheus.DefaultGatherer to Handler, to serve the Go runtime's and
// process's metrics too; this one serves the collector's alone and prints
// part of what a scrape sees.
func Example() {
	st := memstore.New()
	defer st.Close()
	client, err := sortie.NewClient(st, nil)
	if err != nil {
		log.Fatal(err)
	}

	col := metrics.New(client, nil)
	defer col.Close()
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", col.Handler(nil))

	ctx := context.Background()
	if _, err := client.Enqueue(ctx, Email{To: "ada@example.com"}, nil); err != nil {
		log.Fatal(err)
	}

	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	sc := bufio.NewScanner(rec.Body)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "sortie_jobs_enqueued_total") ||
			strings.HasPrefix(line, `sortie_queue_jobs{queue="default",state="available"}`) {
			fmt.Println(line)
		}
	}
	// Output:
	// sortie_jobs_enqueued_total{kind="email",queue="default"} 1
	// sortie_queue_jobs{queue="default",state="available"} 1
}
