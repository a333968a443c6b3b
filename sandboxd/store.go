package sandboxd

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

const recordFile = "sandbox.json"

// sandboxDir is DataDir/sandboxes/<id>.
func (s *Server) sandboxDir(id string) string {
	return filepath.Join(s.dataDir, "sandboxes", id)
}

// saveRecord writes r atomically (write to a temp file, then rename).
func (s *Server) saveRecord(r *record) error {
	b, err := encodeRecord(r)
	if err != nil {
		return err
	}
	return s.writeRecord(r.ID, b)
}

// encodeRecord returns r as saveRecord writes it: compact JSON, encoded on
// every transition (indented, it took twice the CPU, on the way of the next
// answer).
func encodeRecord(r *record) ([]byte, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("save %s: %w", r.ID, err)
	}
	return b, nil
}

// writeRecord writes the encoded record b of sandbox id atomically.
func (s *Server) writeRecord(id string, b []byte) error {
	dir := s.sandboxDir(id)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("save %s: %w", id, err)
	}
	tmp := filepath.Join(dir, recordFile+".tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("save %s: %w", id, err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, recordFile)); err != nil {
		return fmt.Errorf("save %s: %w", id, err)
	}
	return nil
}

// loadRecords reads every record under DataDir/sandboxes. A directory without
// a readable record is skipped and reported.
func (s *Server) loadRecords() ([]*record, error) {
	root := filepath.Join(s.dataDir, "sandboxes")
	ents, err := os.ReadDir(root)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("load records: %w", err)
	}
	var out []*record
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(root, e.Name(), recordFile))
		if err != nil {
			s.log.Warn("sandboxd: skipping sandbox directory without a record", "dir", e.Name(), "err", err)
			continue
		}
		var r record
		if err := json.Unmarshal(b, &r); err != nil || r.ID != e.Name() {
			s.log.Warn("sandboxd: skipping unreadable record", "dir", e.Name(), "err", err)
			continue
		}
		out = append(out, &r)
	}
	return out, nil
}
