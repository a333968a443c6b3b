package jobs_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	alineo "github.com/alineo-labs/alineo"
	"github.com/alineo-labs/alineo/adapters/memory"
	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/jobs"
	"github.com/alineo-labs/alineo/testenv"
)

func mustParse(t *testing.T, doc string) jobs.Spec {
	t.Helper()
	s, err := jobs.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

type recorder struct {
	mu  sync.Mutex
	evs []jobs.Event
}

func (r *recorder) add(ev jobs.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.evs = append(r.evs, ev)
}

func (r *recorder) states() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var s []string
	for _, ev := range r.evs {
		if ev.Index >= 0 && ev.State != jobs.StepStarted {
			s = append(s, string(ev.State))
		}
	}
	return s
}

func TestRunSteps(t *testing.T) {
	url := testenv.Sandboxd(t)
	store := memory.New()
	client, err := alineo.New(alineo.Options{BaseURL: url, Adapter: store})
	if err != nil {
		t.Fatal(err)
	}
	spec := mustParse(t, `{"name":"runner","image":"host","env":{"WHO":"world"},"steps":[
		{"writeFile":{"path":"/root/job/hi.sh","content":"echo hello $WHO"}},
		{"exec":{"command":"sh /root/job/hi.sh"}},
		{"exec":{"command":"exit 3","strict":false}},
		{"execCode":{"code":"echo code"}}]}`)
	rec := &recorder{}
	var out bytes.Buffer
	r := &jobs.Runner{Client: client, Progress: rec.add, Output: &out}
	res, err := r.Run(context.Background(), spec, nil)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	if got, want := res.Live, 4; got != want {
		t.Errorf("live steps = %d, want %d", got, want)
	}
	if got, want := strings.Join(rec.states(), ","), "done,done,done,done"; got != want {
		t.Errorf("states = %s, want %s", got, want)
	}
	if !strings.Contains(out.String(), "hello world") {
		t.Errorf("output = %q, want the script's greeting", out.String())
	}
	es, err := store.ReadAll(context.Background(), "runner", res.SandboxID)
	if err != nil {
		t.Fatal(err)
	}
	var started, closed int
	for _, e := range es {
		switch e.Event {
		case events.ExecStarted:
			started++
		case events.SandboxClosed:
			closed++
		}
	}
	if started != 3 || closed != 1 {
		t.Errorf("ledger: %d exec.started, %d sandbox.closed; want 3 and 1", started, closed)
	}

	// A strict step that fails stops the job with a *StepError naming it.
	failing := mustParse(t, `{"name":"runner","image":"host","steps":[
		{"exec":{"command":"true"}},{"exec":{"command":"exit 7"}},{"exec":{"command":"true"}}]}`)
	_, err = jobs.Run(context.Background(), client, failing, nil)
	var se *jobs.StepError
	var ce *alineo.CommandError
	if !errors.As(err, &se) || se.Index != 1 || !errors.As(err, &ce) || ce.ExitCode != 7 {
		t.Fatalf("err = %v, want a StepError at index 1 wrapping exit code 7", err)
	}
}

// A drain whose checkpoint fails returns ErrDrained wrapping the checkpoint's
// error too.
func TestRunDrainCheckpointFails(t *testing.T) {
	url := testenv.Sandboxd(t)
	client, err := alineo.New(alineo.Options{BaseURL: url, Adapter: memory.New()})
	if err != nil {
		t.Fatal(err)
	}
	spec := mustParse(t, `{"name":"drain","image":"host","steps":[
		{"exec":{"command":"true"}},{"exec":{"command":"true"}}]}`)
	drain := make(chan struct{})
	close(drain)
	boom := errors.New("status store down")
	r := &jobs.Runner{Client: client, Drain: drain,
		OnCheckpoint: func(ctx context.Context, cp jobs.Checkpoint) error { return boom }}
	_, err = r.Run(context.Background(), spec, nil)
	if !errors.Is(err, jobs.ErrDrained) || !errors.Is(err, boom) {
		t.Fatalf("err = %v, want ErrDrained wrapping the checkpoint's error", err)
	}
}
