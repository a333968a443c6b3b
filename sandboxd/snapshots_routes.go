package sandboxd

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// maxSnapshotName bounds a snapshot's name, in bytes.
const maxSnapshotName = 256

// snapshotRoutes mounts the snapshot routes of the protocol.
func (a *api) snapshotRoutes(mux *http.ServeMux, prefix string) {
	mux.HandleFunc("POST "+prefix+"/sandboxes/{id}/snapshots", a.handleCreateSnapshot)
	mux.HandleFunc("GET "+prefix+"/snapshots", a.handleListSnapshots)
	mux.HandleFunc("GET "+prefix+"/snapshots/{snapshotId}", a.handleGetSnapshot)
	mux.HandleFunc("DELETE "+prefix+"/snapshots/{snapshotId}", a.handleDeleteSnapshot)
}

// decodeSnapshotRequest reads the optional body of a create-snapshot request:
// empty, or an object with at most a non-empty name.
func decodeSnapshotRequest(r *http.Request) (string, error) {
	b, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil {
		return "", invalid("INVALID_REQUEST", "", "read body: %v", err)
	}
	if len(b) > maxBody {
		return "", invalid("INVALID_REQUEST", "", "body larger than %d bytes", maxBody)
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return "", nil
	}
	var req createSnapshotRequest
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return "", invalid("INVALID_REQUEST", "", "malformed create-snapshot body: %v", err)
	}
	if dec.More() {
		return "", invalid("INVALID_REQUEST", "", "malformed create-snapshot body: data after the JSON object")
	}
	if req.Name == nil {
		return "", nil
	}
	name := *req.Name
	switch {
	case name == "":
		return "", invalid("INVALID_REQUEST", "name", "name must not be empty when given")
	case len(name) > maxSnapshotName:
		return "", invalid("INVALID_REQUEST", "name", "name is longer than %d bytes", maxSnapshotName)
	case !utf8.ValidString(name) || strings.IndexFunc(name, unicode.IsControl) >= 0:
		return "", invalid("INVALID_REQUEST", "name", "name must be valid UTF-8 without control characters")
	}
	return name, nil
}

func (a *api) handleCreateSnapshot(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if _, err := a.s.get(id); err != nil {
		a.writeErr(w, err)
		return
	}
	name, err := decodeSnapshotRequest(r)
	if err != nil {
		a.writeErr(w, err)
		return
	}
	snap, done, err := a.s.snap.createSnapshot(id, name)
	if err != nil {
		a.writeErr(w, err)
		return
	}
	if wait := preferredWait(r); wait > 0 {
		t := time.NewTimer(wait)
		select {
		case <-done:
			w.Header().Set("Preference-Applied", "wait")
		case <-t.C:
		case <-r.Context().Done():
		}
		t.Stop()
		if now, err := a.s.snap.getSnapshot(snap.ID); err == nil {
			snap = now
		}
	}
	loc := "/snapshots/" + snap.ID
	if strings.HasPrefix(r.URL.Path, "/v1/") {
		loc = "/v1" + loc
	}
	w.Header().Set("Location", loc)
	writeJSON(w, http.StatusAccepted, snap)
}

func (a *api) handleGetSnapshot(w http.ResponseWriter, r *http.Request) {
	snap, err := a.s.snap.getSnapshot(r.PathValue("snapshotId"))
	if err != nil {
		a.writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, snap)
}

func (a *api) handleListSnapshots(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	page, size, err := pageQuery(q)
	if err != nil {
		a.writeErr(w, err)
		return
	}
	items, pg := paginate(a.s.snap.listSnapshots(q.Get("sandboxId"), stateQuery[SnapshotState](q)), page, size)
	writeJSON(w, http.StatusOK, snapshotListResponse{Items: items, Pagination: pg})
}

func (a *api) handleDeleteSnapshot(w http.ResponseWriter, r *http.Request) {
	if err := a.s.snap.deleteSnapshot(r.Context(), r.PathValue("snapshotId")); err != nil {
		a.writeErr(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
