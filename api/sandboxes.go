package api

import (
	"net/http"

	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/api/wire"
	"github.com/alineo-labs/alineo/events"
)

// SandboxList is the answer of GET /v1/sandboxes.
type SandboxList = wire.SandboxList

// EventPage is the answer of GET /v1/sandboxes/{name}/{id}/events.
type EventPage = wire.EventPage

func listOptions(r *http.Request) (adapters.ListOptions, *Error) {
	var o adapters.ListOptions
	q := r.URL.Query()
	switch st := adapters.SandboxStatus(q.Get("status")); st {
	case "", adapters.StatusRunning, adapters.StatusCompleted:
		o.Status = st
	default:
		return o, badRequest("status", `status must be "running" or "completed", got "`+string(st)+`"`)
	}
	before, e := intParam(r, "before", 0, 0)
	if e != nil {
		return o, e
	}
	limit, e := intParam(r, "limit", DefaultPageSize, MaxPageSize)
	if e != nil {
		return o, e
	}
	if limit == 0 {
		return o, badRequest("limit", "limit must be between 1 and 1000")
	}
	o.Before, o.Limit, o.RunID, o.SandboxID = before, int(limit), q.Get("runId"), q.Get("sandboxId")
	return o, nil
}

func (s *Server) listSandboxes(w http.ResponseWriter, r *http.Request) {
	o, e := listOptions(r)
	if e != nil {
		writeError(w, e)
		return
	}
	// Ask for one more to know whether there is a next page.
	o.Limit++
	var ds []adapters.SandboxDetails
	var err error
	if name := r.URL.Query().Get("name"); name != "" {
		ds, err = s.cfg.Store.ListSandboxDetails(r.Context(), name, o)
	} else {
		ds, err = s.cfg.Store.ListAllSandboxDetails(r.Context(), o)
	}
	if err != nil {
		s.storeError(w, r, err)
		return
	}
	out := SandboxList{Sandboxes: ds}
	if len(ds) == o.Limit {
		out.Sandboxes = ds[:o.Limit-1]
		out.NextBefore = out.Sandboxes[len(out.Sandboxes)-1].StartedAt
	}
	if out.Sandboxes == nil {
		out.Sandboxes = []adapters.SandboxDetails{}
	}
	writeJSON(w, http.StatusOK, out)
}

// details returns the session named by the path, or writes a 404.
func (s *Server) details(w http.ResponseWriter, r *http.Request) (*adapters.SandboxDetails, bool) {
	name, id := r.PathValue("name"), r.PathValue("id")
	d, err := s.cfg.Store.GetSandboxDetails(r.Context(), name, id)
	if err != nil {
		s.storeError(w, r, err)
		return nil, false
	}
	if d == nil {
		writeError(w, notFound("no sandbox "+id+" named "+name))
		return nil, false
	}
	return d, true
}

func (s *Server) getSandbox(w http.ResponseWriter, r *http.Request) {
	if d, ok := s.details(w, r); ok {
		writeJSON(w, http.StatusOK, d)
	}
}

func (s *Server) deleteSandbox(w http.ResponseWriter, r *http.Request) {
	d, ok := s.details(w, r)
	if !ok {
		return
	}
	if err := s.cfg.Store.DeleteSandbox(r.Context(), d.Name, d.SandboxID); err != nil {
		s.storeError(w, r, err)
		return
	}
	// The session's entries are gone: the log is what records who deleted it.
	s.log.Info("api: sandbox deleted", "name", d.Name, "sandbox", d.SandboxID, "by", s.actor(r))
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) sandboxEvents(w http.ResponseWriter, r *http.Request) {
	after, e := intParam(r, "after", 0, 0)
	if e != nil {
		writeError(w, e)
		return
	}
	limit, e := intParam(r, "limit", DefaultPageSize, MaxPageSize)
	if e != nil {
		writeError(w, e)
		return
	}
	if limit == 0 {
		writeError(w, badRequest("limit", "limit must be between 1 and 1000"))
		return
	}
	d, ok := s.details(w, r)
	if !ok {
		return
	}
	es, err := s.cfg.Store.ReadAll(r.Context(), d.Name, d.SandboxID)
	if err != nil {
		s.storeError(w, r, err)
		return
	}
	page := EventPage{Events: []events.Entry{}}
	for _, e := range es {
		if e.Seq <= uint64(after) {
			continue
		}
		if len(page.Events) == int(limit) {
			page.NextAfter = page.Events[len(page.Events)-1].Seq
			break
		}
		page.Events = append(page.Events, e)
	}
	writeJSON(w, http.StatusOK, page)
}

func (s *Server) sandboxCheckpoints(w http.ResponseWriter, r *http.Request) {
	d, ok := s.details(w, r)
	if !ok {
		return
	}
	cps, err := s.cfg.Store.ListCheckpoints(r.Context(), d.Name, d.SandboxID)
	if err != nil {
		s.storeError(w, r, err)
		return
	}
	if cps == nil {
		cps = []adapters.CheckpointInfo{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"checkpoints": cps})
}

func (s *Server) environments(w http.ResponseWriter, r *http.Request) {
	envs, err := s.cfg.Store.ListEnvironments(r.Context())
	if err != nil {
		s.storeError(w, r, err)
		return
	}
	if envs == nil {
		envs = []adapters.EnvironmentRecord{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"environments": envs})
}
