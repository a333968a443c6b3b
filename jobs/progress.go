package jobs

import (
	"fmt"
	"io"
	"sync"
	"time"
)

// Printer returns a Progress function that writes one line per step event to
// w, e.g. "[build 2/5] done      exec make test (1.2s)". Safe for concurrent use.
func Printer(w io.Writer) func(Event) {
	var mu sync.Mutex
	return func(ev Event) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintln(w, FormatEvent(ev))
	}
}

// FormatEvent renders one progress event as a line (no newline).
func FormatEvent(ev Event) string {
	if ev.Index < 0 {
		s := fmt.Sprintf("[%s] %-8s %s %s", ev.Job, ev.State, ev.SandboxID, ev.Desc)
		if ev.Err != nil {
			s += ": " + ev.Err.Error()
		}
		return s
	}
	s := fmt.Sprintf("[%s %d/%d] %-8s %s", ev.Job, ev.Index+1, ev.Total, ev.State, ev.Desc)
	switch ev.State {
	case StepDone, StepReplayed:
		if ev.Kind == KindExec || ev.Kind == KindExecCode {
			s += fmt.Sprintf(" (exit %d, %s)", ev.ExitCode, ev.Elapsed.Round(time.Millisecond))
		} else {
			s += fmt.Sprintf(" (%s)", ev.Elapsed.Round(time.Millisecond))
		}
	case StepFailed:
		s += fmt.Sprintf(" (%s): %v", ev.Elapsed.Round(time.Millisecond), ev.Err)
	}
	return s
}
