package sandboxd

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"time"
)

// A stand-in execd used only until package execd is linked (execd_link.go sets
// execdFactory first when it is present): /ping and a shell /command with the
// raw-JSON stream format of API-NOTES §6.1.
var _ = func() int {
	if execdFactory == nil {
		execdFactory = func(cfg ExecdConfig) (http.Handler, func() error, error) {
			mux := http.NewServeMux()
			auth := func(h http.HandlerFunc) http.HandlerFunc {
				return func(w http.ResponseWriter, r *http.Request) {
					if cfg.Token != "" && r.Header.Get(ExecdTokenHeader) != cfg.Token {
						w.WriteHeader(http.StatusUnauthorized)
						return
					}
					h(w, r)
				}
			}
			mux.HandleFunc("GET /ping", auth(func(w http.ResponseWriter, r *http.Request) {}))
			mux.HandleFunc("POST /command", auth(func(w http.ResponseWriter, r *http.Request) {
				var req struct {
					Command string `json:"command"`
				}
				if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Command == "" {
					w.WriteHeader(http.StatusBadRequest)
					return
				}
				w.Header().Set("Content-Type", "text/event-stream")
				fl := w.(http.Flusher)
				send := func(ev map[string]any) {
					ev["timestamp"] = time.Now().UnixMilli()
					b, _ := json.Marshal(ev)
					fmt.Fprintf(w, "%s\n\n", b)
					fl.Flush()
				}
				send(map[string]any{"type": "init", "text": "cmd"})
				cmd := exec.Command("/bin/sh", "-c", req.Command)
				cmd.Env = cfg.Env
				cmd.Dir = cfg.Root
				out, _ := cmd.StdoutPipe()
				if err := cmd.Start(); err != nil {
					send(map[string]any{"type": "error", "error": map[string]any{"ename": "CommandExecError", "evalue": err.Error()}})
					return
				}
				sc := bufio.NewScanner(out)
				for sc.Scan() {
					send(map[string]any{"type": "stdout", "text": sc.Text()})
				}
				if err := cmd.Wait(); err != nil {
					send(map[string]any{"type": "error", "error": map[string]any{"ename": "CommandExecError", "evalue": fmt.Sprint(cmd.ProcessState.ExitCode())}})
					return
				}
				send(map[string]any{"type": "execution_complete"})
			}))
			return mux, func() error { return nil }, nil
		}
	}
	return 0
}()
