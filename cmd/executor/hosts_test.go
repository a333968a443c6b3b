package main

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/bus"
	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/jobs"
	"github.com/alineo-labs/alineo/opensandbox"
	"github.com/alineo-labs/alineo/testenv"
)

// shortTTLHost is a host's sandboxd whose sandboxes expire ttl after they
// are created (testenv.ShortTTLSandboxd), with a client of the server itself.
type shortTTLHost struct {
	url    string // the proxy's: what the host's executors use
	direct *opensandbox.Client
}

func newShortTTLHost(t *testing.T, ttl time.Duration) *shortTTLHost {
	t.Helper()
	s := testenv.ShortTTLSandboxd(t, ttl)
	direct, err := opensandbox.New(opensandbox.Config{BaseURL: s.Direct})
	if err != nil {
		t.Fatal(err)
	}
	return &shortTTLHost{url: s.URL, direct: direct}
}

// lastClosed returns the payload of the sandbox.closed that ends the
// session, or an error saying what it ends with.
func (f *fleetEnv) lastClosed(name, id string) (events.SandboxClosedPayload, error) {
	var p events.SandboxClosedPayload
	l, err := bus.NewLedger(f.bus, bus.LedgerConfig{})
	if err != nil {
		return p, err
	}
	defer l.Close()
	es, err := l.ReadAll(context.Background(), name, id)
	if err != nil {
		return p, err
	}
	if len(es) == 0 || es[len(es)-1].Event != events.SandboxClosed {
		return p, fmt.Errorf("session %s/%s does not end with sandbox.closed (%d entries)", name, id, len(es))
	}
	if last := es[len(es)-1]; len(last.Payload) > 0 {
		if err := last.Decode(&p); err != nil {
			return p, err
		}
	}
	return p, nil
}

// TestHostLostAndBack: two hosts, each with its own sandboxd. The executor
// of host A is SIGKILLed mid-job; the executor of host B takes the job over
// and finishes it, and records A's sandbox unreachable (its server does not
// have it). Nobody renews that sandbox any more: it expires on A by itself.
// When A's executor starts again, it finds the sandbox of a job that moved
// on and records that it expired; nothing is left on either host.
//
// The job has no checkpoint: a takeover on another host resumes from one
// only once the hosts share their checkpoint store.
func TestHostLostAndBack(t *testing.T) {
	ctx := context.Background()
	f := newFleetEnv(t, 2*time.Second)
	hostA := newShortTTLHost(t, 3*time.Second)
	id := f.submit(t, `{"name":"hosts","image":"host","steps":[
		{"exec":{"command":"echo first"}},
		{"exec":{"command":"sleep 6; echo second"}},
		{"exec":{"command":"echo third"}}]}`)
	ttl := []string{"--ack-wait", "2s", "--sandbox-ttl", "3s", "--sandbox-renew", "500ms"}
	w1 := startWorker(t, f.natsURL, hostA.url, append([]string{"--id", "w1"}, ttl...)...)
	var first jobs.Status
	testenv.Eventually(t, 30*time.Second, func() error {
		if f.execStarts(t)["sleep 6; echo second"] == 0 {
			return errors.New("step 2 not started")
		}
		var err error
		first, err = f.queue.Status(ctx, id)
		return err
	})
	// w1 keeps its sandbox alive past the expiration it was created with.
	testenv.Eventually(t, 10*time.Second, func() error {
		sb, err := hostA.direct.GetSandbox(ctx, first.SandboxID)
		if err != nil {
			return err
		}
		if sb.Status.State != opensandbox.StateRunning || sb.ExpiresAt == nil || time.Since(sb.CreatedAt) < 4*time.Second {
			return fmt.Errorf("w1's sandbox is %s, created %v, expires %v; want Running past its first expiration", sb.Status.State, sb.CreatedAt, sb.ExpiresAt)
		}
		return nil
	})
	if err := w1.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-w1.done

	// Host B takes the job over.
	startWorker(t, f.natsURL, f.sandboxURL, append([]string{"--id", "w2"}, ttl...)...)
	st := f.waitStatus(t, id, 40*time.Second, func(st jobs.Status) error {
		if st.State != jobs.StateSucceeded {
			return fmt.Errorf("job %s: %s", st.State, st.Error)
		}
		return nil
	})
	if st.Worker != "w2" || st.Attempt != 2 {
		t.Errorf("status = %+v, want attempt 2 by w2", st)
	}
	want := events.SandboxClosedPayload{Reason: events.ClosedTakenOver, By: "w2", Job: id, Outcome: events.OutcomeUnreachable}
	if p, err := f.lastClosed(first.SandboxName, first.SandboxID); err != nil || p != want {
		t.Errorf("w1's session ends with %+v, %v; want %+v", p, err, want)
	}

	// On host A, the dead executor's sandbox expires on its own.
	testenv.Eventually(t, 15*time.Second, func() error {
		sb, err := hostA.direct.GetSandbox(ctx, first.SandboxID)
		if err != nil {
			return err
		}
		if sb.Status.State != opensandbox.StateTerminated || sb.Status.Reason != "ttl_expiry" {
			return fmt.Errorf("w1's sandbox is %s (%s), want Terminated by its expiration", sb.Status.State, sb.Status.Reason)
		}
		return nil
	})

	// Host A comes back.
	startWorker(t, f.natsURL, hostA.url, append([]string{"--id", "w1"}, ttl...)...)
	want = events.SandboxClosedPayload{Reason: events.ClosedTakenOver, By: "w1", Job: id, Outcome: events.OutcomeExpired}
	testenv.Eventually(t, 20*time.Second, func() error {
		if p, err := f.lastClosed(first.SandboxName, first.SandboxID); err != nil || p != want {
			return fmt.Errorf("w1's session ends with %+v, %v; want %+v", p, err, want)
		}
		return nil
	})
	if _, err := hostA.direct.GetSandbox(ctx, first.SandboxID); !errors.Is(err, opensandbox.ErrNotFound) {
		t.Errorf("w1's sandbox after host A came back: %v, want deleted", err)
	}
	for host, c := range map[string]*opensandbox.Client{"A": hostA.direct, "B": mustClient(t, f.sandboxURL)} {
		p, err := c.ListSandboxes(ctx, opensandbox.ListSandboxesOptions{States: []opensandbox.SandboxState{opensandbox.StateRunning}})
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Items) > 0 {
			t.Errorf("host %s still runs %d sandboxes: %+v", host, len(p.Items), p.Items)
		}
	}
}

func mustClient(t *testing.T, url string) *opensandbox.Client {
	t.Helper()
	c, err := opensandbox.New(opensandbox.Config{BaseURL: url})
	if err != nil {
		t.Fatal(err)
	}
	return c
}
