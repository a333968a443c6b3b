package runtime

import (
	"errors"
	"fmt"
	"io"
	"os"
)

// A sandbox's entrypoint log (DataDir/sandboxes/<id>/entrypoint.log) lies
// outside its disk quota, so no process of the sandbox writes it: the init,
// its entrypoint and execd write into a pipe, and the server drains it into
// the file, keeping at most Config.EntrypointLogLimit bytes. When a write
// would pass the limit, the file is cut to its last half (a line says how
// much went before), so it always holds the latest output and its size
// stays bounded however much a sandbox writes, or a process that ptraces
// the entrypoint makes it write.

// entryLog is the server's end of one sandbox's log pipe.
type entryLog struct {
	f       *os.File
	limit   int64
	size    int64
	marker  int64 // length of the dropped-bytes line at the start, if any
	dropped int64 // bytes of output cut so far
}

// openEntryLog opens (appending to) the log file at path, bounded by limit.
func openEntryLog(path string, limit int64) (*entryLog, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	size, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		f.Close()
		return nil, err
	}
	l := &entryLog{f: f, limit: max(limit, 4096)}
	l.size = size
	if size > l.limit {
		if err := l.cut(0); err != nil {
			f.Close()
			return nil, err
		}
	}
	return l, nil
}

// Write appends p, cutting the file first when it would pass the limit. A
// single p larger than half the limit keeps only its end.
func (l *entryLog) Write(p []byte) (int, error) {
	n := len(p)
	if half := l.limit / 2; int64(len(p)) > half {
		l.dropped += int64(len(p)) - half
		p = p[int64(len(p))-half:]
		if err := l.cut(l.limit); err != nil { // everything before p goes
			return 0, err
		}
	} else if l.size+int64(len(p)) > l.limit {
		if err := l.cut(int64(len(p))); err != nil {
			return 0, err
		}
	}
	w, err := l.f.WriteAt(p, l.size)
	l.size += int64(w)
	if err != nil {
		return 0, err
	}
	return n, nil
}

// cut keeps the last part of the file, so that need more bytes fit below
// half the limit, after a line that counts what went.
func (l *entryLog) cut(need int64) error {
	data := l.size - l.marker
	keep := min(max(l.limit/2-need, 0), data)
	l.dropped += data - keep
	tail := make([]byte, keep)
	if _, err := l.f.ReadAt(tail, l.size-keep); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("entrypoint log: %w", err)
	}
	head := fmt.Appendf(nil, "[sandboxd: %d earlier bytes of this log dropped (limit %d bytes)]\n", l.dropped, l.limit)
	buf := append(head, tail...)
	if _, err := l.f.WriteAt(buf, 0); err != nil {
		return fmt.Errorf("entrypoint log: %w", err)
	}
	if err := l.f.Truncate(int64(len(buf))); err != nil {
		return fmt.Errorf("entrypoint log: %w", err)
	}
	l.size, l.marker = int64(len(buf)), int64(len(head))
	return nil
}

// drain copies r into the log until every writer has closed r, then closes
// both. Write errors (a full data disk) drop the output rather than block
// the sandbox.
func (l *entryLog) drain(r io.ReadCloser) {
	defer r.Close()
	defer l.f.Close()
	buf := make([]byte, 64<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			_, _ = l.Write(buf[:n])
		}
		if err != nil {
			return
		}
	}
}
