package api

import (
	"errors"
	"io"
	"net/http"

	"github.com/alineo-labs/alineo/api/wire"
	"github.com/alineo-labs/alineo/jobs"
)

func (s *Server) queue(w http.ResponseWriter) *jobs.Queue {
	if s.cfg.Queue == nil {
		writeError(w, &Error{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, Message: "no jobs queue configured"})
	}
	return s.cfg.Queue
}

// submitJob accepts a job spec and publishes it to the jobs stream: 202 with
// the job's status (its id in "id").
func (s *Server) submitJob(w http.ResponseWriter, r *http.Request) {
	q := s.queue(w)
	if q == nil {
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes+1))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeError(w, &Error{Status: http.StatusRequestEntityTooLarge, Code: CodeBadRequest, Message: "job spec larger than 4 MiB"})
			return
		}
		writeError(w, badRequest("", "read body: "+err.Error()))
		return
	}
	spec, err := jobs.Parse(body)
	if err != nil {
		var se *jobs.SpecError
		if errors.As(err, &se) {
			writeError(w, &Error{Status: http.StatusBadRequest, Code: CodeInvalidSpec, Field: se.Path, Message: se.Error()})
			return
		}
		writeError(w, badRequest("", err.Error()))
		return
	}
	st, err := q.Submit(r.Context(), spec)
	if err != nil {
		writeError(w, &Error{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, Message: err.Error()})
		return
	}
	w.Header().Set("Location", "/v1/jobs/"+st.ID)
	writeJSON(w, http.StatusAccepted, st)
}

func (s *Server) getJob(w http.ResponseWriter, r *http.Request) {
	q := s.queue(w)
	if q == nil {
		return
	}
	id := r.PathValue("id")
	if !jobs.ValidID(id) {
		writeError(w, badRequest("id", "a job id is 32 lowercase hex digits, got \""+id+"\""))
		return
	}
	st, err := q.Status(r.Context(), id)
	switch {
	case errors.Is(err, jobs.ErrNotFound):
		writeError(w, notFound("no job "+id))
	case err != nil:
		writeError(w, &Error{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, Message: err.Error()})
	default:
		writeJSON(w, http.StatusOK, st)
	}
}

// JobList is the answer of GET /v1/jobs.
type JobList = wire.JobList

// listJobs lists the jobs' statuses, the most recently submitted first
// (limit=N, default 100).
func (s *Server) listJobs(w http.ResponseWriter, r *http.Request) {
	q := s.queue(w)
	if q == nil {
		return
	}
	limit, e := intParam(r, "limit", DefaultPageSize, MaxPageSize)
	if e != nil {
		writeError(w, e)
		return
	}
	sts, err := q.List(r.Context(), int(limit))
	if err != nil {
		writeError(w, &Error{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, Message: err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, JobList{Jobs: sts})
}
