package testutil

import "runtime/metrics"

// GoroutinesCreated returns the goroutines this process has started so far
// (the runtime's /sched/goroutines-created counter).
func GoroutinesCreated() uint64 {
	s := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}
