package alineo

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/alineo-labs/alineo/events"
)

// TestPendingInteractiveFromTypeScriptRows builds the replay cache from rows
// as the TypeScript SDK writes them: an interactive exec_start, its stdin and
// stdout exec_events, no exec_complete before the checkpoint.
func TestPendingInteractiveFromTypeScriptRows(t *testing.T) {
	row := func(ev events.Event, step int, payload string) events.Entry {
		return events.Entry{Event: ev, StepIndex: step, Payload: json.RawMessage(payload)}
	}
	es := []events.Entry{
		row(events.TSExecStart, 1, `{"cmd":"echo done","seq":1}`),
		row(events.TSExecEvent, 1, `{"seq":1,"type":"stdout","text":"done"}`),
		row(events.TSExecComplete, 1, `{"seq":1,"exitCode":0}`),
		row(events.TSExecStart, 2, `{"cmd":"bash","seq":2,"interactive":true,"cwd":"/w","env":{"A":"1"}}`),
		row(events.TSExecEvent, 2, `{"seq":2,"type":"stdout","text":"$ ","timestamp":1}`),
		row(events.TSExecEvent, 2, `{"seq":2,"type":"stdin","text":"cd /tmp\n","timestamp":2}`),
		row(events.TSExecEvent, 2, `{"seq":2,"type":"stdin","text":"export X=1\n","timestamp":3}`),
		row(events.TSExecStart, 3, `{"cmd":"make","seq":3}`), // a plain exec left open: not pending
	}
	r := &replayCache{steps: map[int]*recordedExec{}}
	r.apply(logOf(es).execs)
	if _, ok := r.takePending(1); ok {
		t.Fatal("a completed exec is pending")
	}
	if _, ok := r.takePending(3); ok {
		t.Fatal("a plain exec left open is pending")
	}
	p, ok := r.takePending(2)
	if !ok {
		t.Fatal("the open interactive exec is not pending")
	}
	var got []string
	for _, b := range p.stdin {
		got = append(got, string(b))
	}
	if p.text != "bash" || p.fingerprint != events.Fingerprint(events.KindCommand, "bash") || strings.Join(got, "|") != "cd /tmp\n|export X=1\n" {
		t.Fatalf("pending = %+v (stdin %q)", p, got)
	}
	if _, ok := r.takePending(2); ok {
		t.Fatal("a pending exec is taken twice")
	}
	// A later prefix that completes the step forgets it.
	r2 := &replayCache{steps: map[int]*recordedExec{}}
	r2.apply(logOf(es[3:7]).execs)
	r2.apply(logOf([]events.Entry{row(events.ExecStarted, 2, `{"seq":2,"cmd":"bash","interactive":true}`), row(events.ExecCompleted, 2, `{"seq":2,"exitCode":0}`)}).execs)
	if _, ok := r2.takePending(2); ok {
		t.Fatal("an exec completed in a later session is still pending")
	}
	if (*replayCache)(nil).Len() != 0 {
		t.Fatal("nil cache")
	}
	if _, ok := (*replayCache)(nil).takePending(2); ok {
		t.Fatal("nil cache has a pending exec")
	}
}

func TestExportLineAndEnvNames(t *testing.T) {
	if got, want := exportLine(map[string]string{"B": "it's", "A": "x y"}), `export A='x y' B='it'\''s'; `; got != want {
		t.Fatalf("exportLine = %q, want %q", got, want)
	}
	if exportLine(nil) != "" {
		t.Fatal("exportLine(nil) not empty")
	}
	for name, want := range map[string]bool{"A": true, "_x1": true, "a_B9": true, "": false, "1A": false, "A-B": false, "A B": false, "É": false} {
		if got := validEnvName(name); got != want {
			t.Errorf("validEnvName(%q) = %v, want %v", name, got, want)
		}
	}
}

// TestEmitOutputAfterTheEndIsAConnectionError: a chunk that could not be
// queued because the exec's context ended (a Close, a cancel) ends the exec
// with an *ExecConnectionError wrapping the cause, as every other part of
// the terminal's recording does, not a failed write.
func TestEmitOutputAfterTheEndIsAConnectionError(t *testing.T) {
	sb := &Sandbox{id: "sb-1", ledger: newLedger(&fakeStore{}, "end", "sb-1")}
	e := &Exec{sb: sb, chain: &chain{}, step: 1, exitCode: -1}
	e.out = newOutput(outputWindow, e.refetch)
	it := &Interactive{Exec: e}
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(ErrClosed)
	// The ledger's queue has room: each try races the cancel against it,
	// and a chunk that wins is recorded and handed on.
	cut := 0
	for i := range 64 {
		err := it.emitOutput(ctx, events.Stdout, []byte("x"), true)
		if err == nil {
			continue
		}
		cut++
		var xe *ExecConnectionError
		if !errors.As(err, &xe) || !errors.Is(err, ErrClosed) {
			t.Fatalf("try %d: %v, want an *ExecConnectionError wrapping ErrClosed", i, err)
		}
	}
	if cut == 0 {
		t.Fatal("no try was cut short by the cancel")
	}
}
