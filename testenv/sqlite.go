package testenv

import (
	"path/filepath"
	"testing"
)

// SQLitePath returns the path of a database file that does not exist yet, in a
// folder that does not exist yet either (so stores exercise creating it), under
// a temporary folder removed when t ends.
func SQLitePath(t testing.TB) string {
	t.Helper()
	return filepath.Join(t.TempDir(), "data", "ledger.db")
}
