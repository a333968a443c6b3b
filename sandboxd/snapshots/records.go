package snapshots

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// RecordConfig configures a RecordStore. The zero value is valid.
type RecordConfig struct {
	// Sync flushes a file or a directory to its disk; nil: (*os.File).Sync.
	Sync func(*os.File) error
}

// RecordStore keeps the records sandboxd persists per API snapshot (its
// name, source, image and state, including the Creating and Failed states
// the checkpoint store never holds): one file per snapshot, <id>.json in a
// directory, each written whole (a temporary file renamed over it). The
// caller encodes the records and orders the writes of each one. Safe for
// concurrent use on distinct ids.
type RecordStore struct {
	dir  string
	sync func(*os.File) error
}

// OpenRecordStore opens the record directory dir, creating it (mode 0700)
// if missing.
func OpenRecordStore(dir string, cfg RecordConfig) (*RecordStore, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if cfg.Sync == nil {
		cfg.Sync = (*os.File).Sync
	}
	return &RecordStore{dir: dir, sync: cfg.Sync}, nil
}

// path is the file of record id.
func (s *RecordStore) path(id string) string {
	return filepath.Join(s.dir, id+".json")
}

// IDs lists the ids of the records in the directory, in the order of their
// file names.
func (s *RecordStore) IDs() ([]string, error) {
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, e := range ents {
		name, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || e.IsDir() {
			continue
		}
		ids = append(ids, name)
	}
	return ids, nil
}

// Get returns the encoded record id.
func (s *RecordStore) Get(id string) ([]byte, error) {
	return os.ReadFile(s.path(id))
}

// Put writes b as record id atomically; durable also flushes the file and
// its directory to disk before it returns. Errors name the snapshot.
func (s *RecordStore) Put(id string, b []byte, durable bool) error {
	p := s.path(id)
	if err := s.writeSynced(p+".tmp", b, durable); err != nil {
		return fmt.Errorf("save snapshot %s: %w", id, err)
	}
	if err := os.Rename(p+".tmp", p); err != nil {
		return fmt.Errorf("save snapshot %s: %w", id, err)
	}
	if !durable {
		return nil
	}
	d, err := os.Open(filepath.Dir(p))
	if err != nil {
		return fmt.Errorf("save snapshot %s: %w", id, err)
	}
	err = s.sync(d)
	d.Close()
	if err != nil {
		return fmt.Errorf("save snapshot %s: sync its directory: %w", id, err)
	}
	return nil
}

// writeSynced writes b to a new file at p, flushed to disk when synced.
func (s *RecordStore) writeSynced(p string, b []byte, synced bool) error {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil && synced {
		err = s.sync(f)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// Delete removes record id; a record that is not there is not an error.
func (s *RecordStore) Delete(id string) error {
	if err := os.Remove(s.path(id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("delete snapshot %s: %w", id, err)
	}
	return nil
}
