package sandboxd

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/sandboxd/internal/runtime"
)

// TestRecordWritesKeepOrder checks the ordering of a sandbox's record file:
// a version written after a later one (a write made outside sandbox.mu,
// persistUnlocked) is skipped, and nothing is written once the sandbox is
// forgotten (its directory would come back).
func TestRecordWritesKeepOrder(t *testing.T) {
	s := &Server{dataDir: t.TempDir(), log: slog.New(slog.DiscardHandler)}
	sb := &sandbox{rec: record{Sandbox: Sandbox{ID: "sbx-order"}}}
	onDisk := func() State {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(s.sandboxDir("sbx-order"), recordFile))
		if err != nil {
			t.Fatal(err)
		}
		var r record
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatal(err)
		}
		return r.Status.State
	}

	sb.mu.Lock()
	sb.setStatus(StatePausing, "pause_requested", "")
	v := encodeVersion(sb) // encoded first, written last
	sb.setStatus(StatePaused, "", "")
	s.persist(sb)
	sb.mu.Unlock()
	if got := onDisk(); got != StatePaused {
		t.Fatalf("record on disk is %s, want %s", got, StatePaused)
	}
	s.writeVersion(sb, v)
	if got := onDisk(); got != StatePaused {
		t.Errorf("an older version replaced the newer one: record on disk is %s, want %s", got, StatePaused)
	}

	sb.mu.Lock()
	sb.setStatus(StateRunning, "", "")
	sb.mu.Unlock()
	s.persistUnlocked(sb)
	if got := onDisk(); got != StateRunning {
		t.Errorf("after persistUnlocked the record on disk is %s, want %s", got, StateRunning)
	}

	sb.disk.mu.Lock()
	sb.disk.gone = true // as forget marks it
	sb.disk.mu.Unlock()
	if err := os.RemoveAll(s.sandboxDir("sbx-order")); err != nil {
		t.Fatal(err)
	}
	s.persistUnlocked(sb)
	if _, err := os.Stat(s.sandboxDir("sbx-order")); !os.IsNotExist(err) {
		t.Errorf("a write after forget brought the sandbox's directory back (stat: %v)", err)
	}
}

// TestSandboxTimeMicroseconds: lifecycle times keep microseconds, as the real
// server's do; a transition of a few milliseconds is not misdated by one.
func TestSandboxTimeMicroseconds(t *testing.T) {
	in := time.Date(2026, 12, 2, 16, 0, 25, 123456789, time.FixedZone("X", 3600))
	got := sandboxTime(in)
	want := time.Date(2026, 12, 2, 15, 0, 25, 123456000, time.UTC)
	if !got.Equal(want) || got.Location() != time.UTC {
		t.Errorf("sandboxTime(%v) = %v, want %v", in, got, want)
	}
	b, _ := json.Marshal(got)
	if string(b) != `"2026-12-02T15:00:25.123456Z"` {
		t.Errorf("JSON %s, want \"2026-12-02T15:00:25.123456Z\"", b)
	}
}

// TestTransitionWritesTheRecordLater: a pause or resume writes the record
// recordDelay after the transition, off the answer's way; the transitions of
// a burst are written once, with the last state; a server that stops writes
// the record due at once.
func TestTransitionWritesTheRecordLater(t *testing.T) {
	const delay = 200 * time.Millisecond
	s := &Server{dataDir: t.TempDir(), log: slog.New(slog.DiscardHandler), stop: make(chan struct{}), sandboxes: map[string]*sandbox{},
		recordDelay: delay}
	sb := &sandbox{rec: record{Sandbox: Sandbox{ID: "sbx-t"}}, proc: &runtime.Process{}}
	sb.setStatus(StateRunning, "", "")
	s.sandboxes["sbx-t"] = sb
	path := filepath.Join(s.sandboxDir("sbx-t"), recordFile)
	onDisk := func() (State, error) {
		b, err := os.ReadFile(path)
		if err != nil {
			return "", err
		}
		var r record
		if err := json.Unmarshal(b, &r); err != nil {
			return "", err
		}
		return r.Status.State, nil
	}
	waitDisk := func(want State) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			got, err := onDisk()
			if got == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("record on disk: %s, %v; want %s", got, err, want)
			}
			time.Sleep(time.Millisecond)
		}
	}
	writes := func() uint64 { // one version encoded per write
		sb.mu.Lock()
		defer sb.mu.Unlock()
		return sb.disk.encoded
	}
	nop := func(context.Context, *runtime.Process) error { return nil }
	pause := func() {
		t.Helper()
		if err := s.transition(context.Background(), "sbx-t", "pause", StateRunning, StatePausing, StatePaused, nop); err != nil {
			t.Fatal(err)
		}
	}
	resume := func() {
		t.Helper()
		if err := s.transition(context.Background(), "sbx-t", "resume", StatePaused, StateResuming, StateRunning, nop); err != nil {
			t.Fatal(err)
		}
	}

	start := time.Now()
	pause()
	if _, err := onDisk(); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the record was written on the answer's way: %v", err)
	}
	waitDisk(StatePaused)
	if took := time.Since(start); took < delay {
		t.Errorf("the record was written after %v, want %v", took, delay)
	}
	s.bg.Wait()
	if n := writes(); n != 1 {
		t.Errorf("%d writes for one pause", n)
	}

	// A burst: resume, pause, resume, written once, as Running.
	resume()
	pause()
	resume()
	s.bg.Wait()
	if got, err := onDisk(); got != StateRunning {
		t.Errorf("after a burst the record on disk is %s (%v), want %s", got, err, StateRunning)
	}
	if n := writes(); n != 2 {
		t.Errorf("%d writes for a burst of three transitions, want 1", n-1)
	}

	// A server that stops writes what is due without waiting: with an hour
	// to wait, bg.Wait ends only through the stop.
	s.recordDelay = time.Hour
	pause()
	close(s.stop)
	s.bg.Wait()
	if got, err := onDisk(); got != StatePaused {
		t.Errorf("after the stop the record on disk is %s (%v), want %s", got, err, StatePaused)
	}
}
