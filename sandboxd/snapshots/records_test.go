package snapshots_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/alineo-labs/alineo/sandboxd/snapshots"
)

// TestRecordStore: records are written whole and read back, listed by id
// (not the temporary files or directories beside them), replaced, deleted
// (twice is no error); a durable write flushes the file before its rename
// and then the directory, a plain one flushes nothing.
func TestRecordStore(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "records")
	var synced []string
	rs, err := snapshots.OpenRecordStore(dir, snapshots.RecordConfig{Sync: func(f *os.File) error {
		synced = append(synced, f.Name())
		return f.Sync()
	}})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(dir); err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("record dir: %v, %v; want a directory of mode 0700", st, err)
	}

	if err := rs.Put("snap-b", []byte(`{"id":"snap-b"}`), false); err != nil {
		t.Fatal(err)
	}
	if len(synced) != 0 {
		t.Errorf("a plain write flushed %v", synced)
	}
	if err := rs.Put("snap-a", []byte(`{"id":"snap-a"}`), true); err != nil {
		t.Fatal(err)
	}
	if want := []string{filepath.Join(dir, "snap-a.json.tmp"), dir}; !slices.Equal(synced, want) {
		t.Errorf("a durable write flushed %v, want %v", synced, want)
	}
	if err := rs.Put("snap-b", []byte(`{"id":"snap-b","v":2}`), false); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "d.json"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "snap-c.json.tmp"), nil, 0o600); err != nil {
		t.Fatal(err)
	}

	ids, err := rs.IDs()
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"snap-a", "snap-b"}; !slices.Equal(ids, want) {
		t.Errorf("IDs = %v, want %v", ids, want)
	}
	if b, err := rs.Get("snap-b"); err != nil || string(b) != `{"id":"snap-b","v":2}` {
		t.Errorf("Get(snap-b) = %s, %v; want the second version", b, err)
	}

	for range 2 {
		if err := rs.Delete("snap-a"); err != nil {
			t.Fatalf("Delete(snap-a) = %v", err)
		}
	}
	if _, err := rs.Get("snap-a"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Get(snap-a) after Delete = %v, want fs.ErrNotExist", err)
	}
}
