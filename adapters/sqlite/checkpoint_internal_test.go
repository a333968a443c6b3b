package sqlite

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/testenv"
)

// walProgress reads from the WAL index (the -shm file, in native byte order,
// as https://www.sqlite.org/walformat.html lays it out) the WAL's last valid
// frame (the header's mxFrame, at offset 16) and how many frames are copied
// into the database (the checkpoint information's nBackfill, at offset 96).
func walProgress(t *testing.T, path string) (frames, copied uint32) {
	t.Helper()
	b, err := os.ReadFile(path + "-shm")
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 100 {
		t.Fatalf("WAL index of %d bytes", len(b))
	}
	return binary.NativeEndian.Uint32(b[16:]), binary.NativeEndian.Uint32(b[96:])
}

// TestBackgroundCheckpoint: what commits write to the WAL is copied into the
// database in the background, long before the writer's own checkpoint (at
// autoCheckpointFrames) would copy it in a commit's path; Close stops it.
func TestBackgroundCheckpoint(t *testing.T) {
	path := filepath.Join(t.TempDir(), "l.db")
	s, err := Open(path, Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := range 30 {
		if err := s.Append(t.Context(), startedEntry(fmt.Sprint("s-", i))); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		frames, copied := walProgress(t, path)
		if frames == 0 || copied != frames {
			return fmt.Errorf("%d of the WAL's %d frames copied into the database", copied, frames)
		}
		return nil
	})
	frames, _ := walProgress(t, path)
	if frames >= autoCheckpointFrames {
		t.Fatalf("the WAL holds %d frames: the writer's checkpoint (at %d) may have copied them", frames, autoCheckpointFrames)
	}
	c := s.ck.Load()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.done:
	default:
		t.Error("the checkpointer runs on after Close")
	}
	if s.ck.Load() != nil {
		t.Error("a closed store keeps its checkpointer")
	}
}
