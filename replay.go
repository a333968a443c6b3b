package alineo

import (
	"context"
	"fmt"
	"math"
	"net/http"

	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/events"
)

// maxResumeChain bounds the sessions followed back through sandbox.created's
// resumedFrom when a replay cache is built; a longer (or cyclic) chain is an error.
const maxResumeChain = 1000

// recordedExec is the result of one exec-like call as the ledger recorded it.
type recordedExec struct {
	step        int
	text        string // the command or code
	fingerprint string // events.Fingerprint of kind and text
	chunks      []chunk
	exitCode    int
}

// replayCache holds the results a resumed handle replays, by step index. It is
// read and emptied under the handle's mu: each step is replayed once.
type replayCache struct {
	steps map[int]*recordedExec
}

// Len returns the number of cached steps.
func (r *replayCache) Len() int {
	if r == nil {
		return 0
	}
	return len(r.steps)
}

// take removes and returns the cached result of step, if any. Nil-safe.
func (r *replayCache) take(step int) (*recordedExec, bool) {
	if r == nil {
		return nil, false
	}
	rec, ok := r.steps[step]
	if ok {
		delete(r.steps, step)
	}
	return rec, ok
}

// applyEntries adds to r every exec of es that completed (its exec.completed
// is in es), replacing an earlier result of the same step. es is one session's
// ledger prefix in (Ts, Seq) order. Execs started but not completed in es are
// left out, as are output chunks that are neither stdout nor stderr (entries
// written by the TypeScript SDK may carry other types) and empty chunks.
func (r *replayCache) applyEntries(es []events.Entry) error {
	open := map[int]*recordedExec{}
	get := func(step int) *recordedExec {
		rec := open[step]
		if rec == nil {
			rec = &recordedExec{step: step}
			open[step] = rec
		}
		return rec
	}
	for _, e := range es {
		if e.StepIndex < 1 {
			continue
		}
		switch e.Event {
		case events.ExecStarted:
			var p events.ExecStartedPayload
			if err := e.Decode(&p); err != nil {
				return fmt.Errorf("entry %d: %w", e.Seq, err)
			}
			kind := p.Kind
			if kind == "" {
				kind = events.KindCommand
				if p.Cmd == "" && p.Code != "" {
					kind = events.KindCode
				}
			}
			rec := &recordedExec{step: e.StepIndex, text: p.Text(), fingerprint: p.Fingerprint}
			if rec.fingerprint == "" { // written by the TypeScript SDK
				rec.fingerprint = events.Fingerprint(kind, rec.text)
			}
			open[e.StepIndex] = rec
		case events.ExecOutput:
			var p events.ExecOutputPayload
			if err := e.Decode(&p); err != nil {
				return fmt.Errorf("entry %d: %w", e.Seq, err)
			}
			if p.Type != events.Stdout && p.Type != events.Stderr {
				continue
			}
			if b := p.Bytes(); len(b) > 0 {
				rec := get(e.StepIndex)
				rec.chunks = append(rec.chunks, chunk{stream: p.Type, data: b})
			}
		case events.ExecCompleted:
			var p events.ExecCompletedPayload
			if err := e.Decode(&p); err != nil {
				return fmt.Errorf("entry %d: %w", e.Seq, err)
			}
			rec := get(e.StepIndex)
			rec.exitCode = p.ExitCode
			r.steps[e.StepIndex] = rec
			delete(open, e.StepIndex)
		}
	}
	return nil
}

// checkpointIndex returns the index in es of the last sandbox.checkpoint_created
// entry, or of the last one whose name is tag when tag is not empty; -1 if none.
func checkpointIndex(es []events.Entry, tag string) (int, events.CheckpointCreatedPayload, error) {
	for i := len(es) - 1; i >= 0; i-- {
		if es[i].Event != events.CheckpointCreated {
			continue
		}
		var p events.CheckpointCreatedPayload
		if err := es[i].Decode(&p); err != nil {
			return -1, p, fmt.Errorf("entry %d: %w", es[i].Seq, err)
		}
		if tag == "" || p.Name == tag {
			return i, p, nil
		}
	}
	return -1, events.CheckpointCreatedPayload{}, nil
}

// createdPayload returns the payload of the session's first sandbox.created, if any.
func createdPayload(es []events.Entry) (events.SandboxCreatedPayload, bool, error) {
	for _, e := range es {
		if e.Event == events.SandboxCreated {
			var p events.SandboxCreatedPayload
			if err := e.Decode(&p); err != nil {
				return p, false, fmt.Errorf("entry %d: %w", e.Seq, err)
			}
			return p, true, nil
		}
	}
	return events.SandboxCreatedPayload{}, false, nil
}

// resumePoint is what Resume needs of a session's ledger: the chosen
// checkpoint, the replay cache up to it, and what the new sandbox inherits.
type resumePoint struct {
	checkpoint events.CheckpointCreatedPayload
	cache      *replayCache
	runID      string
	resources  Resources // zero when no session of the chain recorded them
}

// buildResumePoint reads the session (name, sandboxID) and builds its replay
// cache up to its last checkpoint, or its last checkpoint tagged tag.
//
// The cache spans a chain of resumes. A resumed session's ledger holds only
// what it ran live: its replayed calls wrote nothing. So when the session's
// sandbox.created has a resumedFrom, the session it resumed (same name) is read
// too, up to the checkpoint whose snapshotId the resumed sandbox was created
// from, and so on back to a session that was not resumed. The cache is then
// built from the oldest session forwards: each session's completed execs, up to
// its checkpoint, over the ones inherited.
//
// Errors: a *ClientError of status 404 when the session has no matching
// checkpoint, or when a session of the chain is missing or lacks the
// checkpoint its successor was created from.
func buildResumePoint(ctx context.Context, store adapters.Store, name, sandboxID, tag string) (*resumePoint, error) {
	es, err := store.ReadAll(ctx, name, sandboxID)
	if err != nil {
		return nil, fmt.Errorf("read session %s/%s: %w", name, sandboxID, err)
	}
	idx, cp, err := checkpointIndex(es, tag)
	if err != nil {
		return nil, fmt.Errorf("read session %s/%s: %w", name, sandboxID, err)
	}
	if idx < 0 {
		msg := "no checkpoint"
		if tag != "" {
			msg = "no checkpoint tagged " + quote(tag)
		}
		return nil, &ClientError{Status: http.StatusNotFound, SandboxID: sandboxID, Message: msg}
	}
	rp := &resumePoint{checkpoint: cp, cache: &replayCache{steps: map[int]*recordedExec{}}}
	// prefixes[0] is this session's, prefixes[len-1] the oldest one's.
	prefixes := [][]events.Entry{es[:idx]}
	seen := map[string]bool{sandboxID: true}
	cur := es
	for {
		p, ok, err := createdPayload(cur)
		if err != nil {
			return nil, fmt.Errorf("read session %s: %w", name, err)
		}
		if ok {
			if rp.runID == "" {
				rp.runID = p.RunID
			}
			if rp.resources == (Resources{}) && len(p.Resources) > 0 {
				rp.resources = Resources{CPU: p.Resources["cpu"], Memory: p.Resources["memory"], GPU: p.Resources["gpu"]}
			}
		}
		if !ok || p.ResumedFrom == "" {
			break
		}
		if seen[p.ResumedFrom] || len(prefixes) >= maxResumeChain {
			return nil, &ClientError{Status: http.StatusNotFound, SandboxID: sandboxID,
				Message: fmt.Sprintf("resume chain of session %s loops or is longer than %d", quote(name), maxResumeChain)}
		}
		seen[p.ResumedFrom] = true
		prev, err := store.ReadAll(ctx, name, p.ResumedFrom)
		if err != nil {
			return nil, fmt.Errorf("read session %s/%s: %w", name, p.ResumedFrom, err)
		}
		cut := -1
		for i, e := range prev {
			if e.Event != events.CheckpointCreated {
				continue
			}
			var c events.CheckpointCreatedPayload
			if err := e.Decode(&c); err != nil {
				return nil, fmt.Errorf("read session %s/%s: entry %d: %w", name, p.ResumedFrom, e.Seq, err)
			}
			if c.SnapshotID == p.SnapshotID {
				cut = i
			}
		}
		if cut < 0 {
			return nil, &ClientError{Status: http.StatusNotFound, SandboxID: sandboxID,
				Message: fmt.Sprintf("resume chain broken: session %s/%s has no checkpoint %s", quote(name), p.ResumedFrom, p.SnapshotID)}
		}
		prefixes = append(prefixes, prev[:cut])
		cur = prev
	}
	for i := len(prefixes) - 1; i >= 0; i-- {
		if err := rp.cache.applyEntries(prefixes[i]); err != nil {
			return nil, fmt.Errorf("build replay cache of %s/%s: %w", name, sandboxID, err)
		}
	}
	if rp.runID == "" {
		rp.runID = sandboxID // as SandboxDetails does for a session without one
	}
	return rp, nil
}

// noRefetch is the refetch of a replayed exec's output, which never drops a
// chunk (its window is unbounded: the chunks are in memory already).
func noRefetch(context.Context, int, int) ([]chunk, error) {
	return nil, fmt.Errorf("replayed output has no ledger rows")
}

// replayed ends e from the replay cache if its step is cached, and reports
// whether it did. A call whose fingerprint differs from the recorded one fails
// with a *ReplayDivergedError; otherwise e serves the recorded chunks and exit
// code, and a non-zero exit is a *CommandError when e is strict, as live. No
// ledger entry is written either way. Called with s.mu held, before e is
// returned to its caller.
func (s *Sandbox) replayed(e *Exec, fingerprint string) bool {
	rec, ok := s.replay.take(e.step)
	if !ok {
		return false
	}
	if rec.fingerprint != fingerprint {
		e.fail(&ReplayDivergedError{SandboxID: s.id, Step: e.step, Recorded: rec.text, Got: e.text})
		return true
	}
	e.out = newOutput(math.MaxInt, noRefetch)
	for _, c := range rec.chunks {
		_ = e.out.publish(context.Background(), c) // never waits: the window is unbounded
	}
	e.exitCode = rec.exitCode
	if e.strict && rec.exitCode != 0 {
		e.out.finish(&CommandError{ExitCode: rec.exitCode, Command: e.text, SandboxID: s.id})
		return true
	}
	e.out.finish(nil)
	return true
}
