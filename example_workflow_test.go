package sortie_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"maps"
	"slices"
	"strings"

	"github.com/sortiehq/sortie"
	"github.com/sortiehq/sortie/store/memstore"
)

// Page, CountWords, CountLinks and Report are the steps of a workflow.
type (
	Page struct {
		URL string `json:"url"`
	}
	CountWords struct{}
	CountLinks struct{}
	Report     struct{}
)

func (Page) Kind() string       { return "page" }
func (CountWords) Kind() string { return "count_words" }
func (CountLinks) Kind() string { return "count_links" }
func (Report) Kind() string     { return "report" }

// Count is the result the counting steps record.
type Count struct {
	What string `json:"what"`
	N    int    `json:"n"`
}

// pageText returns the result of the page job a counting step depends on.
func pageText(ctx context.Context) (string, error) {
	deps, err := sortie.DependencyResults(ctx)
	if err != nil {
		return "", err
	}
	var text string
	for _, raw := range deps { // one dependency: the page
		if err := json.Unmarshal(raw, &text); err != nil {
			return "", err
		}
	}
	return text, nil
}

// A workflow is a graph: a job starts when every job it depends on has
// completed, and reads their results. Here one fetch feeds two counts
// that run side by side, and a report waits for both.
func ExampleClient_EnqueueWorkflow() {
	ctx := context.Background()
	st := memstore.New()
	defer st.Close()

	const text = "sortie runs <a>jobs</a> and <a>workflows</a>"
	workers := sortie.NewWorkers()
	sortie.AddWorker(workers, sortie.WorkFunc(func(ctx context.Context, job *sortie.Job[Page]) error {
		fmt.Println("fetched", job.Args.URL)
		return sortie.SetResult(ctx, text) // stored when the job completes
	}), nil)
	sortie.AddWorker(workers, sortie.WorkFunc(func(ctx context.Context, job *sortie.Job[CountWords]) error {
		page, err := pageText(ctx)
		if err != nil {
			return err
		}
		return sortie.SetResult(ctx, Count{What: "words", N: len(strings.Fields(page))})
	}), nil)
	sortie.AddWorker(workers, sortie.WorkFunc(func(ctx context.Context, job *sortie.Job[CountLinks]) error {
		page, err := pageText(ctx)
		if err != nil {
			return err
		}
		return sortie.SetResult(ctx, Count{What: "links", N: strings.Count(page, "<a>")})
	}), nil)
	sortie.AddWorker(workers, sortie.WorkFunc(func(ctx context.Context, job *sortie.Job[Report]) error {
		deps, err := sortie.DependencyResults(ctx) // by job ID
		if err != nil {
			return err
		}
		for _, id := range slices.Sorted(maps.Keys(deps)) {
			var c Count
			if err := json.Unmarshal(deps[id], &c); err != nil {
				return err
			}
			fmt.Printf("report: job %d counted %d %s\n", id, c.N, c.What)
		}
		return nil
	}), nil)
	client, err := sortie.NewClient(st, &sortie.Config{Workers: workers})
	if err != nil {
		log.Fatal(err)
	}

	wf := sortie.NewWorkflow()
	page := wf.Add(Page{URL: "https://example.com/"}, nil)
	words := wf.Add(CountWords{}, nil, page)
	links := wf.Add(CountLinks{}, nil, page)
	wf.Add(Report{}, nil, words, links)
	res, err := client.EnqueueWorkflow(ctx, wf) // all four jobs, atomically
	if err != nil {
		log.Fatal(err)
	}
	for _, r := range res {
		fmt.Println("job", r.ID, r.State)
	}
	if _, err := client.Drain(ctx); err != nil { // runs due jobs inline, as a test would
		log.Fatal(err)
	}
	var words2 Count
	if err := client.JobResult(ctx, res[1].ID, &words2); err != nil {
		log.Fatal(err)
	}
	fmt.Println("result of job", res[1].ID, "is", words2.N, words2.What)
	// Output:
	// job 1 available
	// job 2 waiting
	// job 3 waiting
	// job 4 waiting
	// fetched https://example.com/
	// report: job 2 counted 5 words
	// report: job 3 counted 2 links
	// result of job 2 is 5 words
}
