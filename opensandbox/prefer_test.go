package opensandbox_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/opensandbox"
)

// TestTransitionAndWait: PauseAndWait and ResumeAndWait ask for the sandbox in
// its new state (Prefer: return=representation, wait=N) and take it from the
// answer when the server gives it; a 202 without it (OpenSandbox's answer), an
// answer about another sandbox or in another state is polled.
func TestTransitionAndWait(t *testing.T) {
	sandbox := func(id, state string) string {
		return `{"id":"` + id + `","status":{"state":"` + state + `","reason":"r","message":"m"},"createdAt":"2026-11-29T09:00:00Z"}`
	}
	tests := []struct {
		name      string
		call      func(*opensandbox.Client, context.Context, string) (*opensandbox.Sandbox, error)
		action    string
		answer    func(w http.ResponseWriter) // the answer to the POST
		polled    string                      // the state GET answers
		wantReqs  int
		wantErr   error
		wantState opensandbox.SandboxState
	}{
		{"pause, answered with the sandbox", (*opensandbox.Client).PauseAndWait, "pause",
			func(w http.ResponseWriter) { writeJSON(w, 200, sandbox("sbx-1", "Paused")) }, "Running", 1, nil, opensandbox.StatePaused},
		{"resume, answered with the sandbox", (*opensandbox.Client).ResumeAndWait, "resume",
			func(w http.ResponseWriter) { writeJSON(w, 200, sandbox("sbx-1", "Running")) }, "Paused", 1, nil, opensandbox.StateRunning},
		{"pause, 202 and no body", (*opensandbox.Client).PauseAndWait, "pause",
			func(w http.ResponseWriter) { w.WriteHeader(202) }, "Paused", 2, nil, opensandbox.StatePaused},
		{"pause, still Pausing in the answer", (*opensandbox.Client).PauseAndWait, "pause",
			func(w http.ResponseWriter) { writeJSON(w, 200, sandbox("sbx-1", "Pausing")) }, "Paused", 2, nil, opensandbox.StatePaused},
		{"pause, another sandbox in the answer", (*opensandbox.Client).PauseAndWait, "pause",
			func(w http.ResponseWriter) { writeJSON(w, 200, sandbox("sbx-2", "Paused")) }, "Paused", 2, nil, opensandbox.StatePaused},
		{"resume, failed in the answer", (*opensandbox.Client).ResumeAndWait, "resume",
			func(w http.ResponseWriter) { writeJSON(w, 200, sandbox("sbx-1", "Failed")) }, "Running", 1, opensandbox.ErrSandboxFailed, ""},
		{"pause, conflict", (*opensandbox.Client).PauseAndWait, "pause",
			func(w http.ResponseWriter) {
				writeJSON(w, 409, `{"code":"SANDBOX::INVALID_STATE","message":"not running"}`)
			}, "Running", 1, opensandbox.ErrConflict, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := newRecorder(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
				if r.Method == "POST" {
					tt.answer(w)
					return
				}
				writeJSON(w, 200, sandbox("sbx-1", tt.polled))
			})
			sb, err := tt.call(newClient(t, rec.URL), context.Background(), "sbx-1")
			reqs := rec.requests()
			if len(reqs) != tt.wantReqs {
				t.Errorf("requests = %d, want %d", len(reqs), tt.wantReqs)
			}
			if p := reqs[0]; p.Method != "POST" || p.Path != "/v1/sandboxes/sbx-1/"+tt.action || p.Header.Get("Prefer") != "return=representation, wait=10" {
				t.Errorf("first request = %s %s Prefer %q", p.Method, p.Path, p.Header.Get("Prefer"))
			}
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				var se *opensandbox.StateError
				if errors.Is(tt.wantErr, opensandbox.ErrSandboxFailed) && (!errors.As(err, &se) || se.State != "Failed" || se.Reason != "r") {
					t.Errorf("err = %#v, want a *StateError of state Failed", err)
				}
				return
			}
			if err != nil || sb.ID != "sbx-1" || sb.Status.State != tt.wantState {
				t.Fatalf("= %+v, %v; want sbx-1 %s", sb, err, tt.wantState)
			}
		})
	}
}

// TestPreferWaitFollowsTheRequestTimeout: the wait asked for is at most half
// the request timeout and half of what is left of the context, so that the
// server answers before the client gives up; under a second, none is asked
// for.
func TestPreferWaitFollowsTheRequestTimeout(t *testing.T) {
	for _, tt := range []struct {
		timeout, deadline time.Duration
		want              string
	}{
		{0, 0, "return=representation, wait=10"}, // the default timeout, 60 s
		{8 * time.Second, 0, "return=representation, wait=4"},
		{1500 * time.Millisecond, 0, "return=representation"},
		{0, 7 * time.Second, "return=representation, wait=3"},
		{8 * time.Second, time.Hour, "return=representation, wait=4"},
		{0, 3 * time.Second, "return=representation, wait=1"},
		{0, 1500 * time.Millisecond, "return=representation"},
	} {
		rec := newRecorder(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
			writeJSON(w, 202, `{"id":"snap-1","sandboxId":"sbx-1","status":{"state":"Ready"},"createdAt":"2026-11-29T09:00:00Z"}`)
		})
		c := newClient(t, rec.URL, func(cfg *opensandbox.Config) { cfg.RequestTimeout = tt.timeout })
		ctx, cancel := context.Background(), context.CancelFunc(func() {})
		if tt.deadline > 0 {
			ctx, cancel = context.WithTimeout(ctx, tt.deadline)
		}
		_, err := c.CreateSnapshotAndWait(ctx, "sbx-1", "")
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if got := rec.last(t).Header.Get("Prefer"); got != tt.want {
			t.Errorf("timeout %v, deadline %v: Prefer = %q, want %q", tt.timeout, tt.deadline, got, tt.want)
		}
	}
}

// TestCreateSnapshotAndWait: a snapshot Ready in the answer ends the call; one
// still Creating is polled; Failed (in the answer or polled) is a *StateError,
// returned with the snapshot as created; a refused creation returns none.
func TestCreateSnapshotAndWait(t *testing.T) {
	snap := func(state string) string {
		return `{"id":"snap-1","sandboxId":"sbx-1","status":{"state":"` + state + `","reason":"disk"},"createdAt":"2026-11-29T09:00:00Z"}`
	}
	tests := []struct {
		name     string
		created  string // the POST's answer; "" = 409
		polled   string
		wantReqs int
		wantErr  error
	}{
		{"ready in the answer", "Ready", "Creating", 1, nil},
		{"creating, then ready", "Creating", "Ready", 2, nil},
		{"failed in the answer", "Failed", "Creating", 1, opensandbox.ErrSnapshotFailed},
		{"creating, then failed", "Creating", "Failed", 2, opensandbox.ErrSnapshotFailed},
		{"refused", "", "Ready", 1, opensandbox.ErrConflict},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := newRecorder(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
				switch {
				case r.Method == "POST" && tt.created == "":
					writeJSON(w, 409, `{"code":"SANDBOX::INVALID_STATE","message":"paused"}`)
				case r.Method == "POST":
					writeJSON(w, 202, snap(tt.created))
				default:
					writeJSON(w, 200, snap(tt.polled))
				}
			})
			s, err := newClient(t, rec.URL).CreateSnapshotAndWait(context.Background(), "sbx-1", "base")
			if got := len(rec.requests()); got != tt.wantReqs {
				t.Errorf("requests = %d, want %d", got, tt.wantReqs)
			}
			switch {
			case tt.wantErr == nil:
				if err != nil || s.Status.State != opensandbox.SnapshotReady {
					t.Fatalf("= %+v, %v; want Ready", s, err)
				}
			case tt.created == "":
				if !errors.Is(err, tt.wantErr) || s != nil {
					t.Fatalf("= %+v, %v; want nil, %v", s, err, tt.wantErr)
				}
			default:
				var se *opensandbox.StateError
				if !errors.Is(err, tt.wantErr) || !errors.As(err, &se) || se.Kind != "snapshot" || se.Reason != "disk" {
					t.Fatalf("err = %v, want a *StateError wrapping %v", err, tt.wantErr)
				}
				if s == nil || s.ID != "snap-1" {
					t.Errorf("snapshot = %+v, want snap-1 as created", s)
				}
			}
		})
	}
}
