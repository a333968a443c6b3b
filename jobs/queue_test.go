package jobs_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/bus"
	"github.com/alineo-labs/alineo/jobs"
	"github.com/alineo-labs/alineo/testenv"
)

func openQueue(t *testing.T, cfg jobs.QueueConfig) *jobs.Queue {
	t.Helper()
	b, err := bus.Open(context.Background(), bus.Config{URL: testenv.NATS(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	q, err := jobs.OpenQueue(context.Background(), b.JetStream(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

func TestQueueSubmitAndStatus(t *testing.T) {
	q := openQueue(t, jobs.QueueConfig{})
	ctx := context.Background()
	spec := mustParse(t, `{"name":"q","image":"i","steps":[{"exec":{"command":"true"}},{"checkpoint":{"tag":"c"}}]}`)
	st, err := q.Submit(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if !jobs.ValidID(st.ID) || st.State != jobs.StateQueued || st.Steps != 2 || st.SubmittedAt == 0 {
		t.Fatalf("submitted = %+v", st)
	}
	got, err := q.Status(ctx, st.ID)
	if err != nil || got.ID != st.ID || got.Name != "q" || got.State != jobs.StateQueued {
		t.Fatalf("status = %+v, %v", got, err)
	}
	if n, err := q.Pending(ctx); err != nil || n != 1 {
		t.Errorf("pending = %d, %v; want 1", n, err)
	}
	for _, id := range []string{"0123456789abcdef0123456789abcdef", "nope", "../x", ""} {
		if _, err := q.Status(ctx, id); !errors.Is(err, jobs.ErrNotFound) {
			t.Errorf("Status(%q) = %v, want ErrNotFound", id, err)
		}
	}
	var se *jobs.SpecError
	if _, err := q.Submit(ctx, jobs.Spec{Name: "x"}); !errors.As(err, &se) || se.Path != "image" {
		t.Errorf("Submit(invalid) = %v, want a *SpecError for image", err)
	}
}

func TestQueueConfig(t *testing.T) {
	b, err := bus.Open(context.Background(), bus.Config{URL: testenv.NATS(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for _, cfg := range []jobs.QueueConfig{{AckWait: time.Millisecond}, {Replicas: 7}, {MaxDeliver: -1}} {
		if _, err := jobs.OpenQueue(context.Background(), b.JetStream(), cfg); !errors.Is(err, jobs.ErrInvalidConfig) {
			t.Errorf("OpenQueue(%+v) = %v, want ErrInvalidConfig", cfg, err)
		}
	}
	q, err := jobs.OpenQueue(context.Background(), b.JetStream(), jobs.QueueConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if c := q.Config(); c.Stream != jobs.DefaultStream || c.AckWait != jobs.DefaultAckWait || c.MaxDeliver != jobs.DefaultMaxDeliver {
		t.Errorf("defaults = %+v", c)
	}
	if err := (&jobs.Worker{}).Run(context.Background()); !errors.Is(err, jobs.ErrInvalidConfig) {
		t.Errorf("Worker{}.Run = %v, want ErrInvalidConfig", err)
	}
}

func TestFormatEvent(t *testing.T) {
	tests := []struct {
		ev   jobs.Event
		want string
	}{
		{jobs.Event{Job: "j", Index: 1, Total: 3, Kind: jobs.KindExec, Desc: "exec make", State: jobs.StepDone, Elapsed: 1500 * time.Millisecond},
			"[j 2/3] done     exec make (exit 0, 1.5s)"},
		{jobs.Event{Job: "j", Index: 0, Total: 3, Kind: jobs.KindWriteFile, Desc: "writeFile /a", State: jobs.StepSkipped},
			"[j 1/3] skipped  writeFile /a"},
		{jobs.Event{Job: "j", Index: 2, Total: 3, Kind: jobs.KindExec, Desc: "exec x", State: jobs.StepFailed, Err: errors.New("boom")},
			"[j 3/3] failed   exec x (0s): boom"},
		{jobs.Event{Job: "j", Index: -1, SandboxID: "sb", State: jobs.StepSandbox, Desc: "created"},
			"[j] sandbox  sb created"},
	}
	for _, tt := range tests {
		if got := jobs.FormatEvent(tt.ev); got != tt.want {
			t.Errorf("FormatEvent = %q, want %q", got, tt.want)
		}
	}
	if got := (jobs.Step{Exec: &jobs.ExecStep{Command: strings.Repeat("x", 100)}}).Describe(); len(got) > 70 {
		t.Errorf("Describe = %q, want it shortened", got)
	}
}

// The status bucket answers reads from its stream leader only: a direct get
// (nats.go's default for a bucket) may be answered by a lagging replica, and
// a worker reading an old status runs a finished job again. Opening the queue
// again, as every executor does, keeps it so.
func TestStatusBucketReadsFromTheLeader(t *testing.T) {
	b, err := bus.Open(context.Background(), bus.Config{URL: testenv.NATS(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	for i := range 3 {
		cfg := jobs.QueueConfig{}
		if i == 2 {
			cfg.MaxDeliver = 7 // a different queue configuration, the same bucket
		}
		q, err := jobs.OpenQueue(ctx, b.JetStream(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		s, err := b.JetStream().Stream(ctx, "KV_"+q.Config().Bucket)
		if err != nil {
			t.Fatal(err)
		}
		if s.CachedInfo().Config.AllowDirect {
			t.Fatalf("open %d: the status bucket allows direct gets (any replica answers)", i+1)
		}
		st, err := q.Submit(ctx, mustParse(t, `{"name":"q","image":"i","steps":[{"exec":{"command":"true"}}]}`))
		if err != nil {
			t.Fatal(err)
		}
		if got, err := q.Status(ctx, st.ID); err != nil || got.ID != st.ID {
			t.Fatalf("open %d: status = %+v, %v", i+1, got, err)
		}
	}
}
