package api_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	alineo "github.com/alineo-labs/alineo"
	"github.com/alineo-labs/alineo/api"
	"github.com/alineo-labs/alineo/jobs"
	"github.com/alineo-labs/alineo/testenv"
)

// TestJobCancelRetryRoutes: a job that has not started is canceled at once
// (200), a settled one cannot be (409); a canceled job is retried once as a
// new job (202, Location); bad and unknown ids are 400 and 404.
func TestJobCancelRetryRoutes(t *testing.T) {
	e := newEnv(t, token)
	var st jobs.Status
	spec := `{"name":"to-cancel","image":"host","steps":[{"exec":{"command":"true"}}]}`
	if resp := e.do("POST", "/v1/jobs", token, strings.NewReader(spec), &st); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("submit: %d", resp.StatusCode)
	}
	var got jobs.Status
	if resp := e.do("POST", "/v1/jobs/"+st.ID+"/retry", token, strings.NewReader("{}"), nil); resp.StatusCode != http.StatusConflict {
		t.Errorf("retry of a queued job: %d, want 409", resp.StatusCode)
	}
	if resp := e.do("POST", "/v1/jobs/"+st.ID+"/cancel", token, strings.NewReader("{}"), &got); resp.StatusCode != http.StatusOK ||
		got.State != jobs.StateCanceled || got.CanceledBy != "admin" {
		t.Fatalf("cancel: %d %+v, want 200 canceled by admin", resp.StatusCode, got)
	}
	var apiErr api.Error
	if resp := e.do("POST", "/v1/jobs/"+st.ID+"/cancel", token, strings.NewReader("{}"), &apiErr); resp.StatusCode != http.StatusConflict || apiErr.Code != api.CodeConflict {
		t.Errorf("second cancel: %d %+v, want 409 conflict", resp.StatusCode, apiErr)
	}
	var next jobs.Status
	resp := e.do("POST", "/v1/jobs/"+st.ID+"/retry", token, strings.NewReader("{}"), &next)
	if resp.StatusCode != http.StatusAccepted || next.RetryOf != st.ID || next.State != jobs.StateQueued || next.Name != "to-cancel" {
		t.Fatalf("retry: %d %+v, want 202 and a queued job retrying %s", resp.StatusCode, next, st.ID)
	}
	if got, want := resp.Header.Get("Location"), "/v1/jobs/"+next.ID; got != want {
		t.Errorf("Location = %q, want %q", got, want)
	}
	if resp := e.do("GET", "/v1/jobs/"+st.ID, token, nil, &got); resp.StatusCode != 200 || got.RetriedAs != next.ID {
		t.Errorf("the retried job: %d %+v, want retriedAs %s", resp.StatusCode, got, next.ID)
	}
	if resp := e.do("POST", "/v1/jobs/"+st.ID+"/retry", token, strings.NewReader("{}"), &apiErr); resp.StatusCode != http.StatusConflict || !strings.Contains(apiErr.Message, next.ID) {
		t.Errorf("second retry: %d %+v, want 409 naming %s", resp.StatusCode, apiErr, next.ID)
	}
	for path, want := range map[string]int{
		"/v1/jobs/" + jobs.NewID() + "/cancel": http.StatusNotFound,
		"/v1/jobs/" + jobs.NewID() + "/retry":  http.StatusNotFound,
		"/v1/jobs/nope/cancel":                 http.StatusBadRequest,
		"/v1/jobs/nope/retry":                  http.StatusBadRequest,
	} {
		if resp := e.do("POST", path, token, strings.NewReader("{}"), nil); resp.StatusCode != want {
			t.Errorf("POST %s = %d, want %d", path, resp.StatusCode, want)
		}
	}
}

// TestExecutorsRoute: /v1/executors lists a running worker (live, its
// heartbeat moving on) with the jobs it runs, a worker only a running job's
// status names as unknown, and forgets the worker once it stops.
func TestExecutorsRoute(t *testing.T) {
	e := newEnv(t, token)
	ctx := context.Background()
	// A worker that is never given a job: its client reaches no server.
	client, err := alineo.New(alineo.Options{BaseURL: "http://127.0.0.1:1", Adapter: e.ledger})
	if err != nil {
		t.Fatal(err)
	}
	w := &jobs.Worker{Queue: e.queue, Client: client, ID: "w-api", Heartbeat: 100 * time.Millisecond, Concurrency: 2}
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()

	now := time.Now().UnixMilli()
	mine, gone := jobs.NewID(), jobs.NewID()
	putStatus(t, e, jobs.Status{ID: mine, Name: "mine", State: jobs.StateRunning, Attempt: 1, Worker: "w-api", Steps: 3, Done: 1, SubmittedAt: now, UpdatedAt: now})
	putStatus(t, e, jobs.Status{ID: gone, Name: "orphan", State: jobs.StateRunning, Attempt: 1, Worker: "w-gone", Steps: 2, SubmittedAt: now - 1, UpdatedAt: now})
	var first int64
	testenv.Eventually(t, 10*time.Second, func() error {
		var l api.ExecutorList
		if resp := e.do("GET", "/v1/executors", token, nil, &l); resp.StatusCode != 200 {
			return fmt.Errorf("GET /v1/executors = %d", resp.StatusCode)
		}
		if len(l.Executors) != 2 {
			return fmt.Errorf("executors = %+v, want w-api and w-gone", l.Executors)
		}
		x, y := l.Executors[0], l.Executors[1]
		if x.ID != "w-api" || x.State != "live" || x.Concurrency != 2 || x.PID == 0 || len(x.Jobs) != 1 || x.Jobs[0].ID != mine || x.HeartbeatAt < now-1000 {
			return fmt.Errorf("first executor = %+v, want w-api live running %s", x, mine)
		}
		if y.ID != "w-gone" || y.State != "unknown" || len(y.Jobs) != 1 || y.Jobs[0].ID != gone || y.HeartbeatAt != 0 {
			return fmt.Errorf("second executor = %+v, want w-gone unknown running %s", y, gone)
		}
		if first == 0 {
			first = x.HeartbeatAt
		}
		if x.HeartbeatAt == first {
			return fmt.Errorf("heartbeat still at %d", first)
		}
		return nil
	})
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	var l api.ExecutorList
	if resp := e.do("GET", "/v1/executors", token, nil, &l); resp.StatusCode != 200 || len(l.Executors) != 2 || l.Executors[0].ID != "w-api" || l.Executors[0].State != "unknown" {
		t.Errorf("after w-api stopped: %d %+v, want it known only from its job's status", resp.StatusCode, l.Executors)
	}
}
