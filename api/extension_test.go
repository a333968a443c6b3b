package api_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/adapters/adaptertest"
	"github.com/alineo-labs/alineo/adapters/sqlite"
	"github.com/alineo-labs/alineo/api"
	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/testenv"
)

const (
	wfName = "ts-workflow"
	wfSbx  = "fd6e9bcdaaefe2306391d2d061b47fa4"
)

// publishWorkflow publishes the TypeScript SDK's workflow.db (both sessions,
// as written) to the env's ledger and returns the ts-workflow session.
func publishWorkflow(t *testing.T, e *env) []events.Entry {
	t.Helper()
	src, err := sqlite.Open(testenv.Fixture(t, adaptertest.TypeScriptWorkflow.File), sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	var session []events.Entry
	for _, d := range slices.Backward(adaptertest.TypeScriptWorkflow.Details) {
		es, err := src.ReadAll(context.Background(), d.Name, d.SandboxID)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.ledger.AppendBatch(context.Background(), es); err != nil {
			t.Fatal(err)
		}
		if err := e.ledger.Sync(context.Background(), d.SandboxID); err != nil {
			t.Fatal(err)
		}
		if d.SandboxID == wfSbx {
			session = es
		}
	}
	return session
}

// TestExtensionEventsServed: the workflow events of the TypeScript SDK's
// ledger are served as written by the listing, the events route, the SSE
// stream filtered on their names, and the dashboard (as generic events,
// the payload as JSON); a malformed ?event= is a 400.
func TestExtensionEventsServed(t *testing.T) {
	e := newEnv(t, token)
	sse := e.openStream("/v1/events/stream?from=1&event=step_complete,workflow_failed", "")
	defer sse.close()
	want := publishWorkflow(t, e)
	e.waitProjected()

	var list api.SandboxList
	if resp := e.do("GET", "/v1/sandboxes", token, nil, &list); resp.StatusCode != 200 || len(list.Sandboxes) != 2 {
		t.Fatalf("list: %d, %+v", resp.StatusCode, list)
	}
	var page api.EventPage
	if resp := e.do("GET", "/v1/sandboxes/"+wfName+"/"+wfSbx+"/events?limit=1000", token, nil, &page); resp.StatusCode != 200 {
		t.Fatalf("events: %d", resp.StatusCode)
	}
	if len(page.Events) != len(want) {
		t.Fatalf("events route: %d entries, want %d", len(page.Events), len(want))
	}
	for i, got := range page.Events {
		w := want[i]
		if got.Event != w.Event || got.StepIndex != w.StepIndex || got.Error != w.Error || !jsonEqual(got.Payload, w.Payload) {
			t.Fatalf("entry %d = %s/%d %s, want %s/%d %s", i, got.Event, got.StepIndex, got.Payload, w.Event, w.StepIndex, w.Payload)
		}
	}

	// step_complete × 3 of ts-workflow, 1 of ts-workflow-failed, then workflow_failed.
	var streamed []string
	for range 5 {
		ev := sse.next(t, 5*time.Second)
		var en events.Entry
		if err := json.Unmarshal([]byte(ev.Data), &en); err != nil {
			t.Fatalf("data %q: %v", ev.Data, err)
		}
		streamed = append(streamed, string(en.Event))
		if en.Event == "workflow_failed" && en.Error != "Command exited with code 3: exit 3" {
			t.Errorf("workflow_failed error = %q", en.Error)
		}
	}
	if got, want := strings.Join(streamed, ","), "step_complete,step_complete,step_complete,step_complete,workflow_failed"; got != want {
		t.Fatalf("SSE delivered %s, want %s", got, want)
	}
	for _, bad := range []string{"exec.nope", "Step", "a..b"} {
		resp := e.do("GET", "/v1/events/stream?event="+bad, token, nil, nil)
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("stream ?event=%s: %d, want 400", bad, resp.StatusCode)
		}
	}

	req, _ := http.NewRequest("GET", e.srv.URL+"/ui/sandboxes/"+wfName+"/"+wfSbx, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("sandbox page: %d", resp.StatusCode)
	}
	for _, s := range []string{"<td>step_complete</td>", `{&#34;step&#34;:1,&#34;exitCode&#34;:0,&#34;stdout&#34;:&#34;build&#34;}`,
		"<td>workflow_complete</td>", "<td>run_started</td>", `class="marker m-snapshot"`,
		`<span class="label">run_started {&#34;workflow&#34;:&#34;ts-workflow&#34;,&#34;image&#34;:&#34;host&#34;}</span>`} {
		if !strings.Contains(string(body), s) {
			t.Errorf("sandbox page lacks %s", s)
		}
	}
	req, _ = http.NewRequest("GET", e.srv.URL+"/?event=step_complete", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	if resp, err = http.DefaultClient.Do(req); err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `data-event="step_complete"`) {
		t.Errorf("list page's tail is not filtered on step_complete")
	}
}

func jsonEqual(a, b json.RawMessage) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return string(a) == string(b)
	}
	xb, _ := json.Marshal(x)
	yb, _ := json.Marshal(y)
	return string(xb) == string(yb)
}
