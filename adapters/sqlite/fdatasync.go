package sqlite

import (
	"sync"

	"modernc.org/sqlite"
)

// commitWithFdatasync makes SQLite commit with fdatasync(2) instead of
// fsync(2), once per process, where the platform has it (elsewhere it
// changes nothing). The durability is the same: fdatasync writes the data
// and the metadata needed to read it back, its size included, not the
// timestamps, whose journal update is most of what an fsync of a WAL
// overwritten in place waits for. It is what SQLite's own Linux builds do;
// the transpiled library keeps SQLite's source default, fsync, and switches
// process-wide (sqlite.Fdatasync), so every SQLite database of the process
// commits this way once a file-backed Store is opened.
var commitWithFdatasync = sync.OnceFunc(func() {
	if _, err := sqlite.Fdatasync(true); err != nil {
		return // ErrFdatasyncUnavailable (macOS, Windows): SQLite syncs its own way there
	}
})
