package sandboxd

import "net/http"

// snapshotRoutes reserves the snapshot routes of the protocol; they answer 501
// until snapshots land (package sandboxd/snapshots).
func (s *Server) snapshotRoutes(mux *http.ServeMux, prefix string) {
	notYet := func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotImplemented, "NOT_IMPLEMENTED", "snapshots are not supported by this server yet")
	}
	mux.HandleFunc("POST "+prefix+"/sandboxes/{id}/snapshots", notYet)
	mux.HandleFunc("GET "+prefix+"/snapshots", notYet)
	mux.HandleFunc("GET "+prefix+"/snapshots/{snapshotId}", notYet)
	mux.HandleFunc("DELETE "+prefix+"/snapshots/{snapshotId}", notYet)
}
