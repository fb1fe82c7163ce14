package web

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/sortiehq/sortie"
)

// job: GET /jobs/{id}, one job whole, with its workflow's graph when it
// belongs to one and its durable steps as a timeline. The page is made of
// sections (templates job-summary, job-steps, job-workflow, job-data,
// job-errors in job.html), each filled from data.
func (d *Dashboard) job(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r)
	if err != nil {
		return err
	}
	row, err := d.c.JobGet(r.Context(), id)
	if errors.Is(err, sortie.ErrNotFound) {
		return notFound(fmt.Sprintf("No job %d", id), fmt.Sprintf("There is no job %d: it was never enqueued, or it was deleted or pruned after it finished.", id))
	}
	if err != nil {
		return err
	}
	data := map[string]any{"Title": fmt.Sprintf("Job %d", id), "Job": row, "Done": r.URL.Query().Get("done")}
	steps, err := d.stepTimeline(r.Context(), row)
	if err != nil {
		return err
	}
	data["Steps"] = steps
	if row.WorkflowID != 0 {
		g, err := d.workflowGraph(r.Context(), row.WorkflowID, row.ID)
		if err != nil {
			return err
		}
		data["Graph"] = g
	}
	d.render(w, r, http.StatusOK, "job", data)
	return nil
}

// workflowMax bounds the jobs of a workflow a job's page draws.
const workflowMax = 200

// workflowGraph reads the jobs of workflow id and lays them out, job
// current marked.
func (d *Dashboard) workflowGraph(ctx context.Context, id, current int64) (*graph, error) {
	res, err := d.c.JobList(ctx, &sortie.JobListParams{WorkflowID: id, Limit: workflowMax})
	if err != nil {
		return nil, err
	}
	g := layout(res.Jobs, current)
	g.ID, g.More = id, res.NextCursor != 0
	return g, nil
}

// pathID parses the {id} of the path, a job's.
func pathID(r *http.Request) (int64, error) {
	s := r.PathValue("id")
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id < 1 {
		return 0, notFound("No such job", fmt.Sprintf("%q is not a job ID: a job ID is a whole number such as 42.", s))
	}
	return id, nil
}
