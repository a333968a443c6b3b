package sandboxd

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/alineo-labs/alineo/checkpoints"
)

// healthProbeID is a checkpoint id no checkpoint has: Ready reads it to
// reach the checkpoint store.
const healthProbeID = "sandboxd-health-probe"

// Ready reports whether the server can serve: nil, or the first of these
// that fails: its OCI runtime found and its binary still there (an error
// wrapping ErrIsolationUnavailable), its data directory writable, its
// checkpoint store reachable. It blocks until ctx ends at most (the
// checkpoint store's read). Safe for concurrent use.
func (s *Server) Ready(ctx context.Context) error {
	if err := s.rt.Ready(ctx); err != nil {
		return fmt.Errorf("runtime: %w", err)
	}
	f, err := os.CreateTemp(s.dataDir, ".health-*")
	if err != nil {
		return fmt.Errorf("data directory not writable: %w", err)
	}
	f.Close()
	if err := os.Remove(f.Name()); err != nil {
		return fmt.Errorf("data directory: %w", err)
	}
	if _, err := s.snap.db.Get(ctx, healthProbeID); err != nil && !errors.Is(err, checkpoints.ErrCheckpointNotFound) {
		return fmt.Errorf("checkpoint store unreachable: %w", err)
	}
	return nil
}
