package jobs

import (
	"strings"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/events"
)

// closed reports whether the session es ends with sandbox.closed.
func closed(es []events.Entry) bool {
	_, ok := lastClosed(es)
	return ok
}

func TestLastClosed(t *testing.T) {
	e := func(ev events.Event) events.Entry { return events.Entry{Event: ev} }
	ended := func(outcome string) events.Entry {
		return events.New(1, "n", "s", events.SandboxLevel, events.SandboxClosed, events.SandboxClosedPayload{Reason: events.ClosedTakenOver, Outcome: outcome})
	}
	for _, tc := range []struct {
		es                   []events.Entry
		wantClosed, wantDone bool
		wantOutcome          string
	}{
		{nil, false, false, ""},
		{[]events.Entry{e(events.SandboxCreated), e(events.ExecStarted)}, false, false, ""},
		{[]events.Entry{e(events.SandboxCreated), e(events.SandboxClosed)}, true, true, ""},
		{[]events.Entry{e(events.SandboxClosed), e(events.CredentialRevoked)}, true, true, ""},
		{[]events.Entry{e(events.SandboxClosed), e(events.SandboxResumed)}, false, false, ""},
		{[]events.Entry{e(events.SandboxCreated), ended(events.OutcomeUnreachable)}, true, false, events.OutcomeUnreachable},
		{[]events.Entry{ended(events.OutcomeUnreachable), ended(events.OutcomeExpired)}, true, true, events.OutcomeExpired},
		{[]events.Entry{e(events.SandboxCreated), ended(events.OutcomeClosed), e(events.CredentialRevoked)}, true, true, events.OutcomeClosed},
		{[]events.Entry{{Event: events.SandboxClosed, Payload: []byte(`"garbage"`)}}, true, true, ""},
	} {
		p, ok := lastClosed(tc.es)
		if ok != tc.wantClosed || p.Outcome != tc.wantOutcome || settled(tc.es) != tc.wantDone {
			t.Errorf("%v: lastClosed = %+v, %v; settled %v; want outcome %q, %v; settled %v",
				tc.es, p, ok, settled(tc.es), tc.wantOutcome, tc.wantClosed, tc.wantDone)
		}
	}
}

func TestCreateTimeout(t *testing.T) {
	for _, tc := range []struct{ ttl, want string }{
		{"4s", "1m0s"}, {"1m0s", "1m0s"}, {"1m0.2s", "1m1s"}, {"90s", "1m30s"}, {"10m", "10m0s"},
	} {
		ttl, _ := time.ParseDuration(tc.ttl)
		if got := createTimeout(ttl).String(); got != tc.want {
			t.Errorf("createTimeout(%s) = %s, want %s", tc.ttl, got, tc.want)
		}
	}
}

func TestJobActor(t *testing.T) {
	long := strings.Repeat("é", events.MaxActorLen) // 2 bytes a rune
	for _, tt := range []struct{ submitter, worker, want string }{
		{"alice", "executor-3", "alice via executor-3"},
		{"", "executor-3", "executor-3"},
		{long, "w", long[:events.MaxActorLen]},
	} {
		got := JobActor(tt.submitter, tt.worker)
		if got != tt.want || events.ValidateActor(got) != nil {
			t.Errorf("JobActor(%.10q, %q) = %.30q, want %.30q (valid)", tt.submitter, tt.worker, got, tt.want)
		}
	}
}
