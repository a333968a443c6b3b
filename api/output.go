package api

import (
	"net/http"
	"strconv"

	"github.com/alineo-labs/alineo/events"
)

// MaxOutputPage bounds one page of GET .../execs/{step}/output.
const MaxOutputPage = 1 << 20

// execOutput serves one stream of one exec, byte-exact, a page at a time:
// GET /v1/sandboxes/{name}/{id}/execs/{step}/output?stream=stdout|stderr&offset=N&limit=M
// answers the bytes [N, N+M) as application/octet-stream, with the stream's
// size so far in X-Total-Bytes and whether the exec has completed in
// X-Exec-Completed. {step} is the step index, "-branch" appended for a
// parallel branch.
func (s *Server) execOutput(w http.ResponseWriter, r *http.Request) {
	k, ok := parseExecKey(r.PathValue("step"))
	if !ok {
		writeError(w, badRequest("step", "step must be a step index (and -branch), got "+strconv.Quote(r.PathValue("step"))))
		return
	}
	stream := events.Stream(r.URL.Query().Get("stream"))
	if stream == "" {
		stream = events.Stdout
	}
	if stream != events.Stdout && stream != events.Stderr {
		writeError(w, badRequest("stream", `stream must be "stdout" or "stderr", got `+strconv.Quote(string(stream))))
		return
	}
	offset, e := intParam(r, "offset", 0, 0)
	if e != nil {
		writeError(w, e)
		return
	}
	limit, e := intParam(r, "limit", execPageBytes, MaxOutputPage)
	if e != nil {
		writeError(w, e)
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
	v := buildSession(es)
	x := v.find(k)
	if x == nil {
		writeError(w, notFound("sandbox "+d.SandboxID+" has no exec "+k.String()))
		return
	}
	b := x.Stream(stream)
	start := min(int(offset), len(b))
	end := min(start+int(limit), len(b))
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Total-Bytes", strconv.Itoa(len(b)))
	h.Set("X-Exec-Completed", strconv.FormatBool(x.Done))
	h.Set("Content-Length", strconv.Itoa(end-start))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b[start:end])
}
