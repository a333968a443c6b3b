package alineo

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeServer is a minimal OpenSandbox lifecycle server with an execd per sandbox
// under /execd/{id}, written from API-NOTES §3, §4 and §6.1. Commands are
// answered by script, so tests can make the stream misbehave.
type fakeServer struct {
	*httptest.Server

	// script writes the command stream for a command; nil runs defaultScript.
	script func(w http.ResponseWriter, f http.Flusher, cmd string)
	// failCreate makes POST /v1/sandboxes answer this status.
	failCreate int
	// failReason, when set, makes every new sandbox Failed with this reason.
	failReason string
	// snapState is the state of every snapshot (Creating, Ready, Failed);
	// "" refuses snapshots with 409.
	snapState string
	// failDelete makes DELETE /v1/sandboxes/{id} answer this status.
	failDelete int
	// arrived, when set, is called as each command request arrives (with its
	// RemoteAddr), before it is answered.
	arrived func(cmd, remote string)

	mu        sync.Mutex
	peak      int               // most sandboxes alive at once
	sandboxes map[string]string // id → state
	deleted   []string
	images    []string // the image of each create
	next      int
	commands  []string
	prefer    []string                  // the Prefer header of each snapshot create
	conns     map[string]http.ConnState // by RemoteAddr: the state of each connection
}

func newFakeServer(t testing.TB) *fakeServer {
	f := &fakeServer{sandboxes: map[string]string{}, conns: map[string]http.ConnState{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/sandboxes", f.create)
	mux.HandleFunc("GET /v1/sandboxes/{id}", f.get)
	mux.HandleFunc("DELETE /v1/sandboxes/{id}", f.delete)
	mux.HandleFunc("POST /v1/sandboxes/{id}/pause", f.setState("Paused"))
	mux.HandleFunc("POST /v1/sandboxes/{id}/resume", f.setState("Running"))
	mux.HandleFunc("GET /v1/sandboxes/{id}/endpoints/{port}", f.endpoint)
	mux.HandleFunc("POST /v1/sandboxes/{id}/snapshots", f.snapshot(http.StatusAccepted))
	mux.HandleFunc("GET /v1/snapshots/{snap}", f.snapshot(http.StatusOK))
	mux.HandleFunc("GET /execd/{id}/ping", func(w http.ResponseWriter, r *http.Request) {})
	mux.HandleFunc("POST /execd/{id}/command", f.command)
	f.Server = httptest.NewUnstartedServer(mux)
	f.Config.ConnState = func(c net.Conn, state http.ConnState) {
		f.mu.Lock()
		f.conns[c.RemoteAddr().String()] = state
		f.mu.Unlock()
	}
	f.Start()
	t.Cleanup(f.Close)
	return f
}

// connState returns the state of the connection a request came on, from its
// RemoteAddr.
func (f *fakeServer) connState(remote string) http.ConnState {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.conns[remote]
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func (f *fakeServer) create(w http.ResponseWriter, r *http.Request) {
	if f.failCreate != 0 {
		writeJSON(w, f.failCreate, map[string]string{"code": "GENERAL::UNKNOWN_ERROR", "message": "no"})
		return
	}
	f.mu.Lock()
	f.next++
	id := fmt.Sprintf("fake%04d-0000", f.next)
	f.sandboxes[id] = "Running"
	if f.failReason != "" {
		f.sandboxes[id] = "Failed"
	}
	var body struct {
		Image struct{ URI string }
	}
	_ = json.NewDecoder(r.Body).Decode(&body)
	f.images = append(f.images, body.Image.URI)
	f.peak = max(f.peak, len(f.sandboxes))
	f.mu.Unlock()
	writeJSON(w, http.StatusAccepted, map[string]any{
		"id": id, "status": map[string]string{"state": "Pending"}, "createdAt": time.Now().Format(time.RFC3339),
		"entrypoint": []string{"tail", "-f", "/dev/null"},
	})
}

func (f *fakeServer) get(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	state, ok := f.sandboxes[r.PathValue("id")]
	f.mu.Unlock()
	if !ok {
		writeJSON(w, 404, map[string]string{"code": "SANDBOX_NOT_FOUND", "message": "not found"})
		return
	}
	status := map[string]string{"state": state}
	if state == "Failed" {
		status["reason"], status["message"] = f.failReason, "image not found: registry.example/x:1: MANIFEST_UNKNOWN"
	}
	writeJSON(w, 200, map[string]any{
		"id": r.PathValue("id"), "status": status, "createdAt": time.Now().Format(time.RFC3339),
		"entrypoint": []string{"tail"},
	})
}

func (f *fakeServer) delete(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	id := r.PathValue("id")
	if _, ok := f.sandboxes[id]; !ok {
		writeJSON(w, 404, map[string]string{"code": "SANDBOX_NOT_FOUND", "message": "not found"})
		return
	}
	if f.failDelete != 0 {
		writeJSON(w, f.failDelete, map[string]string{"code": "GENERAL::UNKNOWN_ERROR", "message": "no"})
		return
	}
	delete(f.sandboxes, id)
	f.deleted = append(f.deleted, id)
	w.WriteHeader(http.StatusNoContent)
}

func (f *fakeServer) setState(state string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.sandboxes[r.PathValue("id")] = state
		f.mu.Unlock()
		w.WriteHeader(http.StatusAccepted)
	}
}

// snapshot answers a create (ignoring Prefer, as the real server) or a get of
// snapshot snap-1, in state snapState; prefer records each create's Prefer.
// With no snapState, a create is refused (409) and no snapshot exists (404).
func (f *fakeServer) snapshot(status int) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		state := f.snapState
		if r.Method == "POST" {
			f.prefer = append(f.prefer, r.Header.Get("Prefer"))
		}
		f.mu.Unlock()
		switch {
		case r.Method == "POST" && state == "":
			writeJSON(w, http.StatusConflict, map[string]string{"code": "SANDBOX::INVALID_STATE", "message": "no snapshots here"})
			return
		case r.Method == "GET" && (state == "" || r.PathValue("snap") != "snap-1"):
			writeJSON(w, http.StatusNotFound, map[string]string{"code": "SNAPSHOT_NOT_FOUND", "message": "no such snapshot"})
			return
		}
		writeJSON(w, status, map[string]any{"id": "snap-1", "sandboxId": r.PathValue("id"),
			"status": map[string]string{"state": state, "reason": "disk_full"}, "createdAt": "2026-12-04T00:00:00Z"})
	}
}

func (f *fakeServer) endpoint(w http.ResponseWriter, r *http.Request) {
	host := strings.TrimPrefix(f.URL, "http://")
	writeJSON(w, 200, map[string]any{"endpoint": host + "/execd/" + r.PathValue("id")})
}

// sent returns the commands received so far.
func (f *fakeServer) sent() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.commands...)
}

func (f *fakeServer) live() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.sandboxes)
}

func (f *fakeServer) command(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Command string `json:"command"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		writeJSON(w, 400, map[string]string{"code": "INVALID_REQUEST_BODY", "message": err.Error()})
		return
	}
	f.mu.Lock()
	f.commands = append(f.commands, req.Command)
	f.mu.Unlock()
	if f.arrived != nil {
		f.arrived(req.Command, r.RemoteAddr)
	}
	w.Header().Set("Content-Type", "text/event-stream")
	fl := w.(http.Flusher)
	if f.script != nil {
		f.script(w, fl, req.Command)
		return
	}
	defaultScript(w, fl, req.Command)
}

// event writes one execd stream event.
func event(w http.ResponseWriter, fl http.Flusher, v map[string]any) {
	b, _ := json.Marshal(v)
	w.Write(append(b, '\n', '\n'))
	fl.Flush()
}

// defaultScript answers "echo X" with X on stdout, "fail N" with exit N, and
// anything else with its text on stdout and stderr.
func defaultScript(w http.ResponseWriter, fl http.Flusher, cmd string) {
	event(w, fl, map[string]any{"type": "init", "text": "cmd-1"})
	event(w, fl, map[string]any{"type": "ping", "text": "pong"})
	switch {
	case strings.HasPrefix(cmd, "echo "):
		event(w, fl, map[string]any{"type": "stdout", "text": strings.TrimPrefix(cmd, "echo ")})
	case strings.HasPrefix(cmd, "fail "):
		event(w, fl, map[string]any{"type": "stderr", "text": "failing"})
		event(w, fl, map[string]any{"type": "error", "error": map[string]any{"ename": "CommandExecError", "evalue": strings.TrimPrefix(cmd, "fail ")}})
		return
	default:
		event(w, fl, map[string]any{"type": "stdout", "text": cmd})
		event(w, fl, map[string]any{"type": "stderr", "text": "err:" + cmd})
	}
	event(w, fl, map[string]any{"type": "execution_complete", "execution_time": 1})
}
