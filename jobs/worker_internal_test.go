package jobs

import (
	"testing"

	"github.com/alineo-labs/alineo/events"
)

func TestClosed(t *testing.T) {
	e := func(ev events.Event) events.Entry { return events.Entry{Event: ev} }
	for _, tc := range []struct {
		es   []events.Entry
		want bool
	}{
		{nil, false},
		{[]events.Entry{e(events.SandboxCreated), e(events.ExecStarted)}, false},
		{[]events.Entry{e(events.SandboxCreated), e(events.SandboxClosed)}, true},
		{[]events.Entry{e(events.SandboxClosed), e(events.CredentialRevoked)}, true},
		{[]events.Entry{e(events.SandboxClosed), e(events.SandboxResumed)}, false},
	} {
		if got := closed(tc.es); got != tc.want {
			t.Errorf("closed(%v) = %v, want %v", tc.es, got, tc.want)
		}
	}
}
