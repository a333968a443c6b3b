package sandboxd

import "time"

// SweepAt runs the TTL and retention sweep as if the time were now.
func (s *Server) SweepAt(now time.Time) { s.sweep(now) }

// SetSnapshotHook makes h run at the start of every snapshot capture, before
// the sandbox is frozen; nil removes it.
func (s *Server) SetSnapshotHook(h func(snapshotID string)) {
	if h == nil {
		s.snap.hook.Store(nil)
		return
	}
	s.snap.hook.Store(&h)
}

// SnapshotReadyMessage is the format of a Ready snapshot's status message.
const SnapshotReadyMessage = readyMessage

// SetSyncHook makes h see the path of every file and directory a durable
// record write flushes, until the returned func is called.
func SetSyncHook(h func(path string)) (restore func()) {
	syncHook.Store(&h)
	return func() { syncHook.Store(nil) }
}

// SetSnapshotRecordHook makes h run before the record of every capture's
// outcome is written (after the outcome is set and announced); nil removes it.
func (s *Server) SetSnapshotRecordHook(h func(snapshotID string)) {
	if h == nil {
		s.snap.recordHook.Store(nil)
		return
	}
	s.snap.recordHook.Store(&h)
}

// RootDir is the host path where sandbox id's root is mounted.
func (s *Server) RootDir(id string) string { return s.rt.RootDir(id) }
