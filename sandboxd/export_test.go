package sandboxd

import "time"

// SweepAt runs the TTL and retention sweep as if the time were now.
func (s *Server) SweepAt(now time.Time) { s.sweep(now) }
