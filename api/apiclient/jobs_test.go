package apiclient_test

import (
	"errors"
	"testing"

	"github.com/alineo-labs/alineo/api/apiclient"
	"github.com/alineo-labs/alineo/api/apitest"
	"github.com/alineo-labs/alineo/api/wire"
	"github.com/alineo-labs/alineo/jobs"
)

// TestCancelRetryExecutors: the client cancels a queued job, retries it once
// (a second retry is a conflict) and lists the (no) executors.
func TestCancelRetryExecutors(t *testing.T) {
	x := apitest.New(t, "tok")
	c, err := apiclient.New(x.URL, "tok", nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	st, err := c.SubmitJob(ctx, []byte(`{"name":"c","image":"host","steps":[{"exec":{"command":"true"}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.CancelJob(ctx, st.ID)
	if err != nil || got.State != jobs.StateCanceled {
		t.Fatalf("cancel = %+v, %v; want canceled", got, err)
	}
	next, err := c.RetryJob(ctx, st.ID)
	if err != nil || next.RetryOf != st.ID || next.State != jobs.StateQueued {
		t.Fatalf("retry = %+v, %v; want a queued job retrying %s", next, err, st.ID)
	}
	var apiErr *apiclient.Error
	if _, err := c.RetryJob(ctx, st.ID); !errors.As(err, &apiErr) || apiErr.Code != wire.CodeConflict || apiErr.Status != 409 {
		t.Errorf("second retry: %v, want a 409 conflict", err)
	}
	l, err := c.Executors(ctx)
	if err != nil || len(l.Executors) != 0 || l.Now == 0 {
		t.Errorf("executors = %+v, %v; want none, judged now", l, err)
	}
}
