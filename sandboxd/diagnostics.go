package sandboxd

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// maxDiagnostics bounds the inline content of a diagnostics response; longer
// logs keep their end.
const maxDiagnostics = 1 << 20

var diagnosticScopes = map[string]bool{"container": true, "lifecycle": true, "runtime": true, "network": true, "process": true, "all": true}

// diagnostics is the body of the diagnostics routes (API-NOTES §9).
type diagnostics struct {
	SandboxID     string   `json:"sandboxId"`
	Kind          string   `json:"kind"`
	Scope         string   `json:"scope"`
	Delivery      string   `json:"delivery"`
	ContentType   string   `json:"contentType"`
	Content       string   `json:"content"`
	ContentLength int      `json:"contentLength"`
	Truncated     bool     `json:"truncated"`
	Warnings      []string `json:"warnings,omitempty"`
}

// handleDiagnostics serves logs (the entrypoint's output for the container,
// process and all scopes; the state transitions for lifecycle and runtime) and
// events (the state transitions), inline.
func (a *api) handleDiagnostics(w http.ResponseWriter, r *http.Request) {
	id, kind := r.PathValue("id"), r.PathValue("kind")
	if kind != "logs" && kind != "events" {
		writeError(w, http.StatusNotFound, "NOT_FOUND", "no diagnostics of kind "+kind)
		return
	}
	sb, err := a.s.get(id)
	if err != nil {
		a.writeErr(w, err)
		return
	}
	scope := r.URL.Query().Get("scope")
	if scope == "" {
		scope = "all"
	}
	if !diagnosticScopes[scope] {
		a.writeErr(w, invalid("INVALID_REQUEST", "scope", "scope must be one of container, lifecycle, runtime, network, process, all; got %q", scope))
		return
	}
	d := diagnostics{SandboxID: id, Kind: kind, Scope: scope, Delivery: "inline", ContentType: "text/plain; charset=utf-8"}
	switch {
	case scope == "network":
		sb.mu.Lock()
		own := sb.rec.Egress
		sb.mu.Unlock()
		if own {
			d.Warnings = append(d.Warnings, "no network diagnostics: the sandbox has its own network namespace, whose only way out is its egress proxy (GET /policy on port 18080 shows the policy)")
		} else {
			d.Warnings = append(d.Warnings, "no network diagnostics: the sandbox shares the host network")
		}
	case kind == "logs" && (scope == "container" || scope == "process" || scope == "all"):
		d.Content, d.Truncated, err = tailFile(filepath.Join(a.s.sandboxDir(id), "entrypoint.log"), maxDiagnostics)
		if err != nil {
			d.Warnings = append(d.Warnings, a.s.public("entrypoint log: "+err.Error()))
		}
	default:
		sb.mu.Lock()
		var b strings.Builder
		for _, st := range sb.rec.History {
			at := ""
			if st.LastTransitionAt != nil {
				at = st.LastTransitionAt.Format(time.RFC3339Nano)
			}
			fmt.Fprintf(&b, "%s %s", at, st.State)
			if st.Reason != "" {
				fmt.Fprintf(&b, " reason=%s", st.Reason)
			}
			if st.Message != "" {
				fmt.Fprintf(&b, " message=%q", st.Message)
			}
			b.WriteByte('\n')
		}
		sb.mu.Unlock()
		d.Content = b.String()
	}
	d.ContentLength = len(d.Content)
	writeJSON(w, http.StatusOK, d)
}

// tailFile returns the last limit bytes of path.
func tailFile(path string, limit int64) (string, bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", false, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", false, err
	}
	off := max(st.Size()-limit, 0)
	b, err := io.ReadAll(io.NewSectionReader(f, off, st.Size()-off))
	return strings.ToValidUTF8(string(b), "\uFFFD"), off > 0, err
}
