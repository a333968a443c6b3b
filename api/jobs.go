package api

import (
	"context"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

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
	st, err := q.SubmitAs(r.Context(), spec, s.actor(r))
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
	id, ok := jobID(w, r)
	if !ok {
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

// jobID reads the path's job id, or writes a 400.
func jobID(w http.ResponseWriter, r *http.Request) (string, bool) {
	id := r.PathValue("id")
	if !jobs.ValidID(id) {
		writeError(w, badRequest("id", "a job id is 32 lowercase hex digits, got \""+id+"\""))
		return "", false
	}
	return id, true
}

// actor names who makes a request, as job statuses record it: the name of
// the request's user (AdminName for the single token, AnonymousName on an
// open server).
func (s *Server) actor(r *http.Request) string {
	if u, ok := UserFrom(r.Context()); ok {
		return u.Name
	}
	return AnonymousName
}

// jobWriteError answers the error of a cancel or a retry.
func jobWriteError(w http.ResponseWriter, id string, err error) {
	switch {
	case errors.Is(err, jobs.ErrNotFound):
		writeError(w, notFound("no job "+id))
	case errors.Is(err, jobs.ErrSettled), errors.Is(err, jobs.ErrNotRetryable), errors.Is(err, jobs.ErrSpecUnavailable):
		writeError(w, &Error{Status: http.StatusConflict, Code: CodeConflict, Message: err.Error()})
	default:
		writeError(w, &Error{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, Message: err.Error()})
	}
}

// cancelJob cancels a job: 200 with its status when it is canceled (it had
// not started), 202 when its worker stops it before its next step; 409 for a
// job already settled.
func (s *Server) cancelJob(w http.ResponseWriter, r *http.Request) {
	q := s.queue(w)
	if q == nil {
		return
	}
	id, ok := jobID(w, r)
	if !ok {
		return
	}
	st, err := q.Cancel(r.Context(), id, s.actor(r))
	if err != nil {
		jobWriteError(w, id, err)
		return
	}
	status := http.StatusOK
	if !st.State.Terminal() {
		status = http.StatusAccepted
	}
	writeJSON(w, status, st)
}

// retryJob submits a failed or canceled job's spec again as a new job: 202
// with the new job's status (RetryOf names the old one); 409 when the job
// did not fail nor was canceled, was retried already, or its spec was not
// kept.
func (s *Server) retryJob(w http.ResponseWriter, r *http.Request) {
	q := s.queue(w)
	if q == nil {
		return
	}
	id, ok := jobID(w, r)
	if !ok {
		return
	}
	st, err := q.Retry(r.Context(), id, s.actor(r))
	if err != nil {
		jobWriteError(w, id, err)
		return
	}
	w.Header().Set("Location", "/v1/jobs/"+st.ID)
	writeJSON(w, http.StatusAccepted, st)
}

// ExecutorList is the answer of GET /v1/executors.
type ExecutorList = wire.ExecutorList

// listExecutors lists the workers of the jobs queue with their jobs.
func (s *Server) listExecutors(w http.ResponseWriter, r *http.Request) {
	q := s.queue(w)
	if q == nil {
		return
	}
	l, err := executors(r.Context(), q, time.Now())
	if err != nil {
		writeError(w, &Error{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, Message: err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, l)
}

// executors joins the workers' presence records with the jobs' statuses as
// of now.
func executors(ctx context.Context, q *jobs.Queue, now time.Time) (ExecutorList, error) {
	ws, err := q.Workers(ctx)
	if err != nil {
		return ExecutorList{}, err
	}
	sts, err := q.List(ctx, 0)
	if err != nil {
		return ExecutorList{}, err
	}
	return joinExecutors(ws, sts, now), nil
}

// joinExecutors is executors' pure part: each record with its state and
// jobs, then the workers only running jobs' statuses name.
func joinExecutors(ws []jobs.WorkerInfo, sts []jobs.Status, now time.Time) ExecutorList {
	l := ExecutorList{Executors: make([]wire.Executor, 0, len(ws)), Now: now.UnixMilli()}
	byJob := make(map[string]jobs.Status, len(sts))
	for _, st := range sts {
		byJob[st.ID] = st
	}
	index := map[string]int{}
	for _, wi := range ws {
		x := wire.Executor{WorkerInfo: wi, State: wire.ExecutorLive, Jobs: []jobs.Status{}}
		switch {
		case !wi.Live(now):
			x.State = wire.ExecutorSilent
		case wi.Draining:
			x.State = wire.ExecutorDraining
		}
		for _, id := range wi.Running {
			if st, ok := byJob[id]; ok {
				x.Jobs = append(x.Jobs, st)
			}
		}
		index[wi.ID] = len(l.Executors)
		l.Executors = append(l.Executors, x)
	}
	unknown := len(l.Executors)
	for _, st := range sts { // newest first
		if st.State != jobs.StateRunning || st.Worker == "" {
			continue
		}
		i, ok := index[st.Worker]
		if !ok {
			i = len(l.Executors)
			index[st.Worker] = i
			l.Executors = append(l.Executors, wire.Executor{WorkerInfo: jobs.WorkerInfo{ID: st.Worker, Running: []string{}}, State: wire.ExecutorUnknown})
		}
		x := &l.Executors[i]
		if !slices.ContainsFunc(x.Jobs, func(j jobs.Status) bool { return j.ID == st.ID }) {
			x.Jobs = append(x.Jobs, st)
		}
	}
	slices.SortFunc(l.Executors[unknown:], func(a, b wire.Executor) int { return strings.Compare(a.ID, b.ID) })
	return l
}
