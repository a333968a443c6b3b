//go:build unix

package bus

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// lockFile is the file, in the embedded server's store directory, that the
// server holds an exclusive flock(2) on while it runs, and that names its
// process (its pid on the first line).
const lockFile = "nats.lock"

// storeLock is an embedded server's claim on its store directory: one
// server per store, so a second process started on the same directory
// fails at once instead of running a server of its own on the same files
// (which never sees the first one's messages).
type storeLock struct{ f *os.File }

// lockStore takes the claim on dir, or returns a *StoreInUseError naming the
// process that holds it. The kernel drops the lock when its holder exits,
// however it ends: a stale lock file is never in the way.
func lockStore(dir string) (*storeLock, error) {
	path := filepath.Join(dir, lockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		defer f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, &StoreInUseError{Dir: dir, PID: holder(f), URLFile: filepath.Join(dir, urlFile)}
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	// Written over the previous holder's pid, then cut to length: a reader
	// sees one pid or the other on the first line, never a mix.
	pid := strconv.Itoa(os.Getpid()) + "\n"
	if _, err := f.WriteAt([]byte(pid), 0); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if err := f.Truncate(int64(len(pid))); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return &storeLock{f: f}, nil
}

// holder is the pid the lock file f names, 0 if none.
func holder(f *os.File) int {
	b := make([]byte, 32)
	n, _ := f.ReadAt(b, 0)
	line, _, _ := strings.Cut(string(b[:n]), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		return 0
	}
	return pid
}

// release gives the claim up (closing the file drops the flock).
func (l *storeLock) release() {
	if l != nil {
		_ = l.f.Close()
	}
}
