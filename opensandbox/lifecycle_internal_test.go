package opensandbox

import (
	"testing"
	"time"
)

// TestPollScheduleFollowsTheWait: the wait loops poll a tenth of the time
// waited so far after the last poll, at least 250 µs and at most 100 ms
// apart: a transition is seen at most 250 µs or 10% of its duration late,
// not a flat 100 ms (which made a 4 ms snapshot cost 103 ms).
func TestPollScheduleFollowsTheWait(t *testing.T) {
	var clock time.Time
	p := &pollSchedule{start: clock, max: pollMax, now: func() time.Time { return clock }}
	for _, tt := range []struct{ waited, want time.Duration }{
		{0, 250 * time.Microsecond},
		{2 * time.Millisecond, 250 * time.Microsecond},
		{10 * time.Millisecond, time.Millisecond},
		{40 * time.Millisecond, 4 * time.Millisecond},
		{300 * time.Millisecond, 30 * time.Millisecond},
		{time.Second, 100 * time.Millisecond},
		{time.Hour, 100 * time.Millisecond},
	} {
		clock = p.start.Add(tt.waited)
		if got := p.NextBackOff(); got != tt.want {
			t.Errorf("after %v: next poll in %v, want %v", tt.waited, got, tt.want)
		}
	}
	// Walked through: a 400 µs transition is seen by 650 µs, a 2.6 ms one by
	// 2.9 ms, a 36 ms one by 40 ms, a 250 ms one by 275 ms, in a bounded
	// number of polls.
	for _, took := range []time.Duration{400 * time.Microsecond, 2600 * time.Microsecond, 4 * time.Millisecond, 36 * time.Millisecond,
		250 * time.Millisecond, 2 * time.Second} {
		clock = time.Time{}
		p := &pollSchedule{start: clock, max: pollMax, now: func() time.Time { return clock }}
		polls := 1
		for clock.Sub(p.start) < took {
			clock = clock.Add(p.NextBackOff())
			polls++
		}
		late := clock.Sub(p.start) - took
		if late > max(pollFirst, took/pollFraction) || polls > 75+int(took/pollMax) {
			t.Errorf("a %v transition: seen %v late, after %d polls", took, late, polls)
		}
	}
}
