package alineo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"math"
	"net/http"

	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/events"
)

// maxResumeChain bounds the sessions followed back through sandbox.created's
// resumedFrom when a replay cache is built; a longer (or cyclic) chain is an error.
const maxResumeChain = 1000

// recordedExec is one exec-like call as the ledger recorded it: the payloads
// of its entries, kept undecoded. Building a cache only groups entries by step;
// a step is decoded when it is replayed, so resuming a long run costs one
// ledger read, and each replayed call a few small decodes.
type recordedExec struct {
	step      int
	started   json.RawMessage // nil when the ledger has no exec.started for the step
	outputs   []json.RawMessage
	completed json.RawMessage
}

// replayResult is a decoded recordedExec.
type replayResult struct {
	text        string // the command or code
	fingerprint string // events.Fingerprint of kind and text
	chunks      []chunk
	exitCode    int
	code        codeResult // code's value and exception (exec.output of type "result", "error")
}

// decode decodes the recorded call. Output chunks that are neither stdout nor
// stderr (the TypeScript SDK records every execd event as an exec_event:
// init, ping, error, execution_complete, stdin...) and empty ones are left
// out; of the others, a result's text is the call's value and an error that
// is an exception (not a shell's exit) its exception. A call recorded by the TypeScript SDK has no fingerprint: it is
// computed from the recorded kind and text. Its output lines carry no
// newline, and they are joined as they are: the replay gives what the
// TypeScript SDK's own replay gives (printf 'a\nb\n' replays as "ab").
func (rec *recordedExec) decode() (replayResult, error) {
	var res replayResult
	if rec.started != nil {
		var p events.ExecStartedPayload
		if err := json.Unmarshal(events.UnwrapPayload(rec.started), &p); err != nil {
			return res, fmt.Errorf("decode exec.started of step %d: %w", rec.step, err)
		}
		res.text, res.fingerprint = p.Text(), p.Fingerprint
		if res.fingerprint == "" {
			kind := p.Kind
			if kind == "" {
				kind = events.KindCommand
				if p.Cmd == "" && p.Code != "" {
					kind = events.KindCode
				}
			}
			res.fingerprint = events.Fingerprint(kind, res.text)
		}
	}
	for _, raw := range rec.outputs {
		raw = events.UnwrapPayload(raw)
		var p events.ExecOutputPayload
		if err := json.Unmarshal(raw, &p); err != nil {
			if _, output := events.OutputStream(raw); !output {
				continue // an execd event of another type, whatever its fields
			}
			return res, fmt.Errorf("decode exec.output of step %d: %w", rec.step, err)
		}
		if b := p.Bytes(); len(b) > 0 && (p.Type == events.Stdout || p.Type == events.Stderr) {
			res.chunks = append(res.chunks, chunk{stream: p.Type, data: b})
		} else if err := recordedCode(raw, p.Type, &res.code); err != nil {
			return res, fmt.Errorf("decode exec.output of step %d: %w", rec.step, err)
		}
	}
	var p events.ExecCompletedPayload
	if err := json.Unmarshal(events.UnwrapPayload(rec.completed), &p); err != nil {
		return res, fmt.Errorf("decode exec.completed of step %d: %w", rec.step, err)
	}
	res.exitCode = p.ExitCode
	return res, nil
}

// replayCache holds the results a resumed handle replays, by step index. It is
// read and emptied under the handle's mu: each step is replayed once.
type replayCache struct {
	steps   map[int]*recordedExec
	pending map[int]*recordedExec // interactive execs started, not completed (notePending)
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

// apply adds to r every exec of rs that completed (its exec.completed is in
// rs), replacing an earlier result of the same step. rs is the exec entries
// of one session's ledger prefix, in (Ts, Seq) order (sessionLog); execs
// started but not completed in rs are left out. Payloads are not decoded
// here (see recordedExec).
func (r *replayCache) apply(rs execRecords) {
	if len(r.steps) == 0 {
		// Sized once for the execs rs completes: a long session's map
		// otherwise grows (and rehashes) a dozen times.
		n := 0
		for x := range rs.all() {
			if x.kind == execCompleted {
				n++
			}
		}
		r.steps = make(map[int]*recordedExec, n)
	}
	open := map[int]*recordedExec{}
	get := func(step int) *recordedExec {
		rec := open[step]
		if rec == nil {
			rec = &recordedExec{step: step}
			open[step] = rec
		}
		return rec
	}
	for x := range rs.all() {
		switch x.kind {
		case execStarted:
			open[x.step] = &recordedExec{step: x.step, started: x.payload}
		case execOutput:
			rec := get(x.step)
			rec.outputs = append(rec.outputs, x.payload)
		case execCompleted:
			rec := get(x.step)
			rec.completed = x.payload
			r.steps[x.step] = rec
			delete(open, x.step)
		}
	}
	r.notePending(open)
}

// sessionLog is a session's ledger as Resume reads it: its exec entries,
// the bulk of a long session, as the three fields a replay needs, and every
// other entry whole, each in the ledger's (Ts, Seq) order. A 50k-exec
// session is 150k entries: kept whole, their 200-odd bytes and ten
// pointers each were most of what a resume allocated and the garbage
// collector scanned, only to be dropped.
type sessionLog struct {
	execs  execRecords
	others []events.Entry
	at     []int // at[i] is execs.n when others[i] was read
}

// execRecords is a list of execRecord kept in chunks: a scan does not know
// how many are coming, and a slice grown by doubling copied them all again
// and again (a tenth of a 150k-entry read's CPU).
type execRecords struct {
	chunks [][]execRecord // each of execChunk records, the last one filling
	n      int            // the records kept
}

// execChunk is the number of records in a chunk of execRecords.
const execChunk = 4096

func (x *execRecords) add(r execRecord) {
	if x.n%execChunk == 0 {
		x.chunks = append(x.chunks, make([]execRecord, 0, execChunk))
	}
	last := &x.chunks[len(x.chunks)-1]
	*last = append(*last, r)
	x.n++
}

// prefix returns the first n records.
func (x execRecords) prefix(n int) execRecords {
	k := (n + execChunk - 1) / execChunk
	chunks := x.chunks[:k:k]
	if k > 0 && n%execChunk != 0 {
		chunks = append(chunks[:k-1:k-1], chunks[k-1][:n%execChunk])
	}
	return execRecords{chunks: chunks, n: n}
}

// all yields the records in order.
func (x execRecords) all() iter.Seq[*execRecord] {
	return func(yield func(*execRecord) bool) {
		for _, c := range x.chunks {
			for i := range c {
				if !yield(&c[i]) {
					return
				}
			}
		}
	}
}

// execRecord is one exec.started, exec.output or exec.completed entry of a
// step (either vocabulary), as a replay needs it.
type execRecord struct {
	step    int
	kind    execKind
	payload json.RawMessage
}

// execKind is the event of an execRecord.
type execKind uint8

const (
	execStarted execKind = iota + 1
	execOutput
	execCompleted
)

// add appends e to l, keeping of an exec entry only its execRecord. A
// copy: e may be reused once add returns (adapters.Scanner).
func (l *sessionLog) add(e *events.Entry) {
	if e.StepIndex >= 1 {
		var k execKind
		switch e.Event.Canonical() {
		case events.ExecStarted:
			k = execStarted
		case events.ExecOutput:
			k = execOutput
		case events.ExecCompleted:
			k = execCompleted
		}
		if k != 0 {
			l.execs.add(execRecord{step: e.StepIndex, kind: k, payload: e.Payload})
			return
		}
	}
	l.others = append(l.others, *e)
	l.at = append(l.at, l.execs.n)
}

// before returns the exec entries read before others[i].
func (l *sessionLog) before(i int) execRecords { return l.execs.prefix(l.at[i]) }

// logOf returns the sessionLog of the session's entries es.
func logOf(es []events.Entry) *sessionLog {
	l := &sessionLog{}
	for i := range es {
		l.add(&es[i])
	}
	return l
}

// readSessionLog reads the session (name, sandboxID) from store: with
// ScanAll when store is an adapters.Scanner (no slice of every entry is
// built), else with ReadAll.
func readSessionLog(ctx context.Context, store adapters.Ledger, name, sandboxID string) (*sessionLog, error) {
	if s, ok := store.(adapters.Scanner); ok {
		var l sessionLog
		err := s.ScanAll(ctx, name, sandboxID, func(e *events.Entry) error {
			l.add(e)
			return nil
		})
		if !errors.Is(err, adapters.ErrRescan) {
			if err != nil {
				return nil, err
			}
			return &l, nil
		}
	}
	es, err := store.ReadAll(ctx, name, sandboxID)
	if err != nil {
		return nil, err
	}
	return logOf(es), nil
}

// checkpointIndex returns the index in es of the last sandbox.checkpoint_created
// entry, or of the last one whose name is tag when tag is not empty; -1 if none.
func checkpointIndex(es []events.Entry, tag string) (int, events.CheckpointCreatedPayload, error) {
	for i := len(es) - 1; i >= 0; i-- {
		if !es[i].Event.Is(events.CheckpointCreated) {
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
		if e.Event.Is(events.SandboxCreated) {
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
	image      string    // "" when no session of the chain recorded it
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
func buildResumePoint(ctx context.Context, store adapters.Ledger, name, sandboxID, tag string) (*resumePoint, error) {
	l, err := readSessionLog(ctx, store, name, sandboxID)
	if err != nil {
		return nil, fmt.Errorf("read session %s/%s: %w", name, sandboxID, err)
	}
	return resumePointOf(ctx, store, name, sandboxID, tag, l)
}

// resumePointOf is buildResumePoint for the session's log l, read already;
// store is read for the sessions it was resumed from.
func resumePointOf(ctx context.Context, store adapters.Ledger, name, sandboxID, tag string, l *sessionLog) (*resumePoint, error) {
	idx, cp, err := checkpointIndex(l.others, tag)
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
	prefixes := []execRecords{l.before(idx)}
	seen := map[string]bool{sandboxID: true}
	cur := l.others
	for {
		p, ok, err := createdPayload(cur)
		if err != nil {
			return nil, fmt.Errorf("read session %s: %w", name, err)
		}
		if ok {
			if rp.runID == "" {
				rp.runID = p.RunID
			}
			if rp.image == "" {
				rp.image = p.Image
			}
			if rp.resources == (Resources{}) && len(p.Resources) > 0 {
				rp.resources = resourcesFromLimits(p.Resources)
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
		prev, err := readSessionLog(ctx, store, name, p.ResumedFrom)
		if err != nil {
			return nil, fmt.Errorf("read session %s/%s: %w", name, p.ResumedFrom, err)
		}
		cut := -1
		for i, e := range prev.others {
			if !e.Event.Is(events.CheckpointCreated) {
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
		prefixes = append(prefixes, prev.before(cut))
		cur = prev.others
	}
	for i := len(prefixes) - 1; i >= 0; i-- {
		rp.cache.apply(prefixes[i])
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
// with a *ReplayDivergedError; otherwise e serves the recorded chunks, exit
// code, value and exception, and a non-zero exit is a *CommandError when e is
// strict, as live. A
// recorded entry that does not decode fails e with a *SandboxError. No ledger
// entry is written in any case. Called with s.mu held, before e is
// returned to its caller.
func (s *Sandbox) replayed(e *Exec, fingerprint string) bool {
	rec, ok := s.replay.take(e.step)
	if !ok {
		return false
	}
	res, err := rec.decode()
	switch {
	case err != nil:
		e.fail(&SandboxError{SandboxID: s.id, Op: fmt.Sprintf("replay exec %d", e.step), Err: err})
		return true
	case res.fingerprint != fingerprint:
		e.fail(&ReplayDivergedError{SandboxID: s.id, Step: e.step, Recorded: res.text, Got: e.text})
		return true
	}
	e.out = newOutput(math.MaxInt, noRefetch)
	for _, c := range res.chunks {
		_ = e.out.publish(context.Background(), c) // never waits: the window is unbounded
	}
	e.out.finish(e.settle(res.exitCode, res.code))
	return true
}
