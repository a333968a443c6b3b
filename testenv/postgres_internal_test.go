package testenv

import (
	"os"
	"path/filepath"
	"testing"
)

func TestSweepStaleKeepsLockedFolders(t *testing.T) {
	stale, err := os.MkdirTemp("", "alineo-pg-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(stale, lockName), nil, 0o600); err != nil { // unlocked: its owner died
		t.Fatal(err)
	}
	live, err := os.MkdirTemp("", "alineo-pg-")
	if err != nil {
		t.Fatal(err)
	}
	lock, err := lockDir(live)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lock.Close(); os.RemoveAll(live); os.RemoveAll(stale) })

	sweepStale()
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Fatalf("stale folder still there (err %v)", err)
	}
	if _, err := os.Stat(live); err != nil {
		t.Fatalf("live folder swept: %v", err)
	}
}
