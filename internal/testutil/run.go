package testutil

import (
	"context"
	"fmt"
	"io"
	"regexp"
	"testing"
	"time"
)

// RunFunc is a command's run function: cmd/*'s run(ctx, args, getenv,
// stdout), which returns when ctx is done or its work is.
type RunFunc func(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error

// Run is a RunFunc running in a goroutine (Start). Out holds its output so
// far.
type Run struct {
	Out    *SyncBuffer
	cancel context.CancelFunc
	done   chan error
	err    error
	ended  bool
}

// Start calls run(ctx, args, getenv, Out) in a goroutine, with a context that
// Stop cancels. t's cleanup stops it (and waits for it) if the test did not.
func Start(t testing.TB, run RunFunc, args []string, getenv func(string) string) *Run {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &Run{Out: &SyncBuffer{}, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- run(ctx, args, getenv, r.Out) }()
	t.Cleanup(func() {
		if !r.ended {
			cancel()
			<-r.done
		}
	})
	return r
}

// Match returns re's submatches in the output so far, or an error quoting
// the output when re does not match yet: a condition for testenv.Eventually.
func (r *Run) Match(re *regexp.Regexp) ([]string, error) {
	out := r.Out.String()
	m := re.FindStringSubmatch(out)
	if m == nil {
		return nil, fmt.Errorf("no match for %s in %q", re, out)
	}
	return m, nil
}

// Stop cancels the run's context and waits at most timeout for it to
// return; it returns run's error. It fails t (Fatal) when run does not return
// in time. Stopping a run that returned already gives its error again.
func (r *Run) Stop(t testing.TB, timeout time.Duration) error {
	t.Helper()
	if r.ended {
		return r.err
	}
	r.cancel()
	select {
	case r.err = <-r.done:
		r.ended = true
		return r.err
	case <-time.After(timeout):
		r.ended = true // the cleanup does not wait for it either
		t.Fatalf("run did not return within %v after its context was cancelled; output:\n%s", timeout, r.Out)
		return nil
	}
}

// Wait waits at most timeout for the run to return by itself (its context
// is not cancelled) and returns its error. It fails t (Fatal) when run does
// not return in time.
func (r *Run) Wait(t testing.TB, timeout time.Duration) error {
	t.Helper()
	if r.ended {
		return r.err
	}
	select {
	case r.err = <-r.done:
		r.ended = true
		return r.err
	case <-time.After(timeout):
		t.Fatalf("run did not return by itself within %v; output:\n%s", timeout, r.Out)
		return nil
	}
}

// Returned reports whether the run has returned, without waiting.
func (r *Run) Returned() bool {
	if r.ended {
		return true
	}
	select {
	case r.err = <-r.done:
		r.ended = true
		return true
	default:
		return false
	}
}
