package jobs_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	alineo "github.com/alineo-labs/alineo"
	"github.com/alineo-labs/alineo/bus"
	"github.com/alineo-labs/alineo/internal/registrytest"
	"github.com/alineo-labs/alineo/jobs"
	"github.com/alineo-labs/alineo/sandboxd"
	"github.com/alineo-labs/alineo/testenv"
	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// TestWorkerFencedLeavesJob: a worker whose sandbox is taken over by another
// writer (it lost its lease) stops without failing or settling the job.
func TestWorkerFencedLeavesJob(t *testing.T) {
	ctx := context.Background()
	b, err := bus.Open(ctx, bus.Config{URL: testenv.NATS(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	q, err := jobs.OpenQueue(ctx, b.JetStream(), jobs.QueueConfig{AckWait: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	l, err := bus.NewLedger(b, bus.LedgerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	client, err := alineo.New(alineo.Options{BaseURL: testenv.Sandboxd(t), Adapter: l})
	if err != nil {
		t.Fatal(err)
	}
	st, err := q.Submit(ctx, mustParse(t, `{"name":"fenced","image":"host","steps":[
		{"exec":{"command":"sleep 1"}},{"exec":{"command":"echo after"}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	failed := make(chan struct{}, 16)
	w := &jobs.Worker{Queue: q, Client: client, Ledger: l, ID: "w1", Progress: func(_ string, ev jobs.Event) {
		if ev.State == jobs.StepFailed {
			failed <- struct{}{}
		}
	}}
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	var sandbox string
	testenv.Eventually(t, 20*time.Second, func() error {
		s, err := q.Status(ctx, st.ID)
		if err != nil || s.SandboxID == "" {
			return fmt.Errorf("no sandbox yet: %+v %v", s, err)
		}
		sandbox = s.SandboxID
		return nil
	})
	// Another writer takes the sandbox over while step 1 sleeps.
	other, err := bus.NewLedger(b, bus.LedgerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := other.Takeover(ctx, sandbox); err != nil {
		t.Fatal(err)
	}
	// The worker's next write fails with ErrFenced; the job must not be
	// failed or acknowledged by it. Run returns after the job's handling.
	select {
	case <-failed:
	case <-time.After(20 * time.Second):
		t.Fatal("step 1 never failed after the takeover")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	s, err := q.Status(ctx, st.ID)
	if err != nil {
		t.Fatal(err)
	}
	if s.State != jobs.StateRunning {
		t.Fatalf("status = %+v, want still running (left to the new owner)", s)
	}
	if n, err := q.Pending(ctx); err != nil || n != 1 {
		t.Errorf("pending = %d, %v; want the job still in the stream", n, err)
	}
}

// TestWorkerPermanentErrorNotRetried (issue 40 item 7): a job whose image
// cannot be had fails at its first attempt (of 3), with the server's
// answer: 404 IMAGE_NOT_FOUND from a registry without the image, 424
// IMAGE_UNAUTHORIZED from one that wants credentials, 424 IMAGE_PULL_FAILED
// from one nobody answers on, and the hint for a name without a registry
// host. It is not handed back to be retried.
func TestWorkerPermanentErrorNotRetried(t *testing.T) {
	ctx := context.Background()
	b, err := bus.Open(ctx, bus.Config{URL: testenv.NATS(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	q, err := jobs.OpenQueue(ctx, b.JetStream(), jobs.QueueConfig{AckWait: time.Minute, MaxDeliver: 3})
	if err != nil {
		t.Fatal(err)
	}
	l, err := bus.NewLedger(b, bus.LedgerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	reg := registrytest.New(t) // empty: every image is unknown
	private := registrytest.New(t)
	privImage := private.Push(t, "private/app:1", registrytest.Image(t, v1.Config{Cmd: []string{"true"}},
		registrytest.Layer(t, registrytest.File{Name: "hello.txt", Body: "hello\n"})))
	private.RequireAuth("alice", "s3cret")
	t.Setenv("DOCKER_CONFIG", t.TempDir()) // no credentials
	// PullTimeout bounds the short name's pull from Docker Hub, wherever DNS
	// leads: it fails IMAGE_PULL_FAILED within the create's wait at worst.
	url, _ := testenv.SandboxdServer(t, sandboxd.Config{InsecureRegistries: []string{reg.Host, private.Host, "127.0.0.1:1"},
		PullTimeout: 20 * time.Second})
	client, err := alineo.New(alineo.Options{BaseURL: url, Adapter: l})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, image string
		want        []string // in the job's error
	}{
		{"not-found", reg.Host + "/no/such-image:1", []string{"404 IMAGE_NOT_FOUND", "NAME_UNKNOWN"}},
		{"unauthorized", privImage, []string{"424 IMAGE_UNAUTHORIZED", "UNAUTHORIZED: authentication required"}},
		{"unreachable", "127.0.0.1:1/no/such-image:1", []string{"424 IMAGE_PULL_FAILED", "connection refused"}},
		// Docker Hub: not found, unauthorized or out of reach, but the hint.
		{"short-name", "definitely/not-an-image:nope", []string{"IMAGE_", `the image "host" is this host's own system`, "--registry-mirror"}},
	}
	ids := map[string]string{}
	for _, c := range cases {
		st, err := q.Submit(ctx, mustParse(t, fmt.Sprintf(`{"name":%q,"image":%q,"steps":[{"exec":{"command":"true"}}]}`, c.name, c.image)))
		if err != nil {
			t.Fatal(err)
		}
		ids[c.name] = st.ID
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w := &jobs.Worker{Queue: q, Client: client, Ledger: l, ID: "w1"}
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	final := map[string]jobs.Status{}
	testenv.Eventually(t, 60*time.Second, func() error {
		for _, c := range cases {
			s, err := q.Status(ctx, ids[c.name])
			if err != nil || s.State != jobs.StateFailed {
				return fmt.Errorf("job %s not failed yet: %+v %v", c.name, s, err)
			}
			final[c.name] = s
		}
		return nil
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		f := final[c.name]
		if f.Attempt != 1 {
			t.Errorf("job %s failed at attempt %d, want 1 (not retried): %s", c.name, f.Attempt, f.Error)
		}
		for _, want := range c.want {
			if !strings.Contains(f.Error, want) {
				t.Errorf("job %s's error %q lacks %q", c.name, f.Error, want)
			}
		}
		if hinted := strings.Contains(f.Error, "--registry-mirror"); hinted != (c.name == "short-name") {
			t.Errorf("job %s's error has the hint: %v, want %v (a name without a registry host only)", c.name, hinted, !hinted)
		}
		t.Logf("%s: attempt %d: %s", c.name, f.Attempt, f.Error)
	}
}
