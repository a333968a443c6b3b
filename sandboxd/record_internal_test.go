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

// TestTransitionWritesTheRecordOnceAnswered: a pause or resume writes the
// record only once the caller's ctx ends (a handler's, once it has answered),
// not on the way of the answer; with a ctx that never ends, within a second.
func TestTransitionWritesTheRecordOnceAnswered(t *testing.T) {
	s := &Server{dataDir: t.TempDir(), log: slog.New(slog.DiscardHandler), stop: make(chan struct{}), sandboxes: map[string]*sandbox{}}
	sb := &sandbox{rec: record{Sandbox: Sandbox{ID: "sbx-t"}}, proc: &proc{}}
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
		deadline := time.Now().Add(5 * time.Second)
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
	freeze := func(context.Context, *proc) error { return nil }

	ctx, cancel := context.WithCancel(context.Background())
	if err := s.transition(ctx, "sbx-t", "pause", StateRunning, StatePausing, StatePaused, freeze); err != nil {
		t.Fatal(err)
	}
	if _, err := onDisk(); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the record was written before the caller was done: %v", err)
	}
	cancel()
	waitDisk(StatePaused)

	start := time.Now()
	if err := s.transition(context.Background(), "sbx-t", "resume", StatePaused, StateResuming, StateRunning, freeze); err != nil {
		t.Fatal(err)
	}
	waitDisk(StateRunning)
	if took := time.Since(start); took < 900*time.Millisecond {
		t.Errorf("with a ctx that never ends, the record was written after %v, want about a second", took)
	}
	s.bg.Wait()
}
