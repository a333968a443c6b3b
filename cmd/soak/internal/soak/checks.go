package soak

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/jobs"
)

// StreamMsg is one message of the ledger stream, read back at the end.
type StreamMsg struct {
	Seq     uint64
	Subject string
	MsgID   string // Nats-Msg-Id: <epoch>.<n> on ledger entries
	// Fence is the sandbox id of a fence message; "" for entries.
	Fence string
	// Entry is the decoded ledger entry (nil for a fence or a message that
	// did not decode: DecodeErr).
	Entry     *events.Entry
	DecodeErr string
}

// Observation is everything the checks look at, collected at the end.
type Observation struct {
	Jobs     []Job
	Stream   []StreamMsg
	Witness  []Acked
	Auditors []AuditorLog
	// SandboxdLive are the sandboxes sandboxd still has in a state other
	// than Terminated or Failed; ReadModelRunning the sessions the read
	// model calls running.
	SandboxdLive     []string
	ReadModelRunning []string
	// Verify is what `projector verify` said when it failed; "" when it passed.
	Verify string
	// Lag and Offset are the projector partitions' last figures (the sum
	// of their lag_events, the lowest offset), Partitions each partition's;
	// LagErr says why they could not be read.
	Lag        float64
	Offset     uint64
	Partitions []PartitionProgress
	LagErr     string
	// Crashes are the exits no fault caused.
	Crashes []string

	// The multi-host soak's (Hosts empty otherwise). ExecutorHosts names
	// each executor's host; HostLosses are the hosts the schedule killed or
	// partitioned, with the jobs running on each.
	Hosts         []string
	ExecutorHosts map[string]string
	HostLosses    []HostLoss
	// HostSandboxes are each host's sandboxes in a state other than
	// Terminated or Failed; HostErrs why a host's sandboxd could not be
	// listed.
	HostSandboxes map[string][]string
	HostErrs      map[string]string
	// Checkpoints are the checkpoint stores' checkpoints with the blobs
	// they reference; Blobs the blob keys each store's bucket holds, by
	// store; BlobsErr what could not be listed.
	Checkpoints []CheckpointRefs
	Blobs       map[string]map[string]bool
	BlobsErr    []string
}

// Result is one row of the checks table.
type Result struct {
	Check  string
	Pass   bool
	Detail string
	// Problems are every problem the check found (Detail shows the first).
	Problems []string
}

// Check is a named check of an Observation.
type Check struct {
	Name string
	Run  func(*Observation) (detail string, problems []string)
}

// Checks are the soak's checks, in the table's order.
var Checks = []Check{
	{"every job finished exactly once with the right result", checkJobs},
	{"steps before the last checkpoint ran live exactly once", checkPreCheckpoint},
	{"every acknowledged event is in the stream exactly once", checkAcked},
	{"projected tables equal the ledger (projector verify)", checkVerify},
	{"no fenced writer's event after its fence", checkFences},
	{"no sandbox left running (sandboxd, read model)", checkNothingRunning},
	{"every auditor saw its filter's events once, in order", checkAuditors},
	{"projector lag back to zero", checkLag},
	{"no process exited by itself", checkCrashes},
}

// RunChecks runs every check on o: Checks, and HostChecks after them on
// a multi-host run's.
func RunChecks(o *Observation) []Result {
	if len(o.Hosts) > 0 {
		return runChecks(o, append(slices.Clone(Checks), HostChecks...))
	}
	return runChecks(o, Checks)
}

func runChecks(o *Observation, cs []Check) []Result {
	out := make([]Result, 0, len(cs))
	for _, c := range cs {
		detail, problems := c.Run(o)
		r := Result{Check: c.Name, Pass: len(problems) == 0, Detail: detail, Problems: problems}
		if !r.Pass {
			r.Detail = summarize(problems)
		}
		out = append(out, r)
	}
	return out
}

func summarize(problems []string) string {
	const show = 3
	s := strings.Join(problems[:min(show, len(problems))], "; ")
	if len(problems) > show {
		s += fmt.Sprintf("; and %d more", len(problems)-show)
	}
	return s
}

// session is one session's entries, in stream order.
type session struct {
	id      string
	entries []events.Entry
}

// sessionsOf groups the stream's entries named name by sandbox, in order
// of their first entry.
func (o *Observation) sessionsOf(name string) []*session {
	var out []*session
	byID := map[string]*session{}
	for _, m := range o.Stream {
		if m.Entry == nil || m.Entry.Name != name {
			continue
		}
		s := byID[m.Entry.SandboxID]
		if s == nil {
			s = &session{id: m.Entry.SandboxID}
			byID[s.id] = s
			out = append(out, s)
		}
		s.entries = append(s.entries, *m.Entry)
	}
	return out
}

// byName indexes the stream's sessions by name once.
func (o *Observation) byName() map[string][]*session {
	names := map[string]bool{}
	for _, m := range o.Stream {
		if m.Entry != nil {
			names[m.Entry.Name] = true
		}
	}
	out := map[string][]*session{}
	for n := range names {
		out[n] = o.sessionsOf(n)
	}
	return out
}

// execRun is one live run of a command in a session.
type execRun struct {
	cmd      string
	seq      int    // the exec's seq in its session
	at       uint64 // stream sequence of its exec.started
	stdout   string
	exitCode int
	done     bool
}

func execRuns(s *session) []*execRun {
	var runs []*execRun
	bySeq := map[int]*execRun{}
	for _, e := range s.entries {
		switch e.Event {
		case events.ExecStarted:
			var p events.ExecStartedPayload
			if e.Decode(&p) == nil {
				r := &execRun{cmd: p.Text(), seq: p.Seq, at: e.Seq}
				runs = append(runs, r)
				bySeq[p.Seq] = r
			}
		case events.ExecOutput:
			var p events.ExecOutputPayload
			if e.Decode(&p) == nil && bySeq[p.Seq] != nil && p.Type == events.Stdout {
				bySeq[p.Seq].stdout += p.Text
			}
		case events.ExecCompleted:
			var p events.ExecCompletedPayload
			if e.Decode(&p) == nil && bySeq[p.Seq] != nil {
				bySeq[p.Seq].exitCode, bySeq[p.Seq].done = p.ExitCode, true
			}
		}
	}
	return runs
}

// checkJobs: every job succeeded, and exactly one attempt finished it: the
// session its status names completed the final step once, with the right
// output. Steps after a checkpoint are at-least-once (a job whose lease
// lapsed is taken over and resumed from its checkpoint), so an earlier
// attempt may have completed the final step too, but only if it was then
// taken over: a fence on its sandbox after that completion, so nothing of
// it was recorded afterwards. An earlier finish never fenced is a job
// finished twice (two workers ran it at once).
func checkJobs(o *Observation) (string, []string) {
	if len(o.Jobs) == 0 {
		return "", []string{"no job was submitted"}
	}
	sessions := o.byName()
	lastFence := map[string]uint64{}
	for _, m := range o.Stream {
		if m.Fence != "" {
			lastFence[m.Fence] = m.Seq
		}
	}
	var problems []string
	rerun := 0
	for _, j := range o.Jobs {
		if j.Status.State != jobs.StateSucceeded {
			problems = append(problems, fmt.Sprintf("%s: %s %s", j.Name, j.Status.State, j.Status.Error))
			continue
		}
		final, others := 0, 0
		for _, s := range sessions[j.Name] {
			for _, r := range execRuns(s) {
				if r.cmd != j.FinalCmd || !r.done || r.exitCode != 0 {
					continue
				}
				switch {
				case s.id == j.Status.SandboxID:
					final++
					if r.stdout != j.Want {
						problems = append(problems, fmt.Sprintf("%s: result %q in %s, want %q", j.Name, r.stdout, s.id, j.Want))
					}
				case lastFence[s.id] > r.at:
					others++ // finished, then taken over: superseded
				default:
					problems = append(problems, fmt.Sprintf("%s: finished in %s too (never taken over), besides %s", j.Name, s.id, j.Status.SandboxID))
				}
			}
		}
		if final != 1 {
			problems = append(problems, fmt.Sprintf("%s: final step completed %d times in %s, the session its status names", j.Name, final, j.Status.SandboxID))
		}
		if others > 0 {
			rerun++
		}
	}
	return fmt.Sprintf("%d jobs succeeded, each finished by one attempt (%d re-run after their lease lapsed)", len(o.Jobs), rerun), problems
}

func checkPreCheckpoint(o *Observation) (string, []string) {
	sessions := o.byName()
	var problems []string
	steps := 0
	for _, j := range o.Jobs {
		ss := sessions[j.Name]
		// The job's last checkpoint: its session and stream sequence.
		var cpSession *session
		var cpAt uint64
		for _, s := range ss {
			for _, e := range s.entries {
				var p events.CheckpointCreatedPayload
				if e.Event == events.CheckpointCreated && e.Decode(&p) == nil && p.Name == j.Tag && e.Seq > cpAt {
					cpSession, cpAt = s, e.Seq
				}
			}
		}
		if cpSession == nil {
			problems = append(problems, fmt.Sprintf("%s: no checkpoint %q recorded", j.Name, j.Tag))
			continue
		}
		for _, cmd := range j.PreCheckpoint {
			steps++
			in, after := 0, 0
			for _, s := range ss {
				for _, r := range execRuns(s) {
					switch {
					case r.cmd != cmd:
					case s == cpSession:
						in++
					case r.at > cpAt:
						after++
					}
				}
			}
			if in != 1 || after != 0 {
				problems = append(problems, fmt.Sprintf("%s: %q ran live %d time(s) in the checkpoint's session %s and %d after the checkpoint",
					j.Name, cmd, in, cpSession.id, after))
			}
		}
	}
	return fmt.Sprintf("%d steps before checkpoints, each live once", steps), problems
}

type ackKey struct {
	sandbox string
	step    int
	event   events.Event
}

func checkAcked(o *Observation) (string, []string) {
	var problems []string
	count := map[ackKey]int{}
	ids := map[string]uint64{}
	entries := 0
	for _, m := range o.Stream {
		if m.DecodeErr != "" {
			problems = append(problems, fmt.Sprintf("message %d on %s does not decode: %s", m.Seq, m.Subject, m.DecodeErr))
		}
		if m.Entry == nil {
			continue
		}
		entries++
		e := m.Entry
		if m.MsgID != "" {
			key := e.SandboxID + "/" + m.MsgID
			if first, dup := ids[key]; dup {
				problems = append(problems, fmt.Sprintf("message id %s of %s stored twice (%d and %d)", m.MsgID, e.SandboxID, first, m.Seq))
			}
			ids[key] = m.Seq
		}
		if e.Name == WitnessName {
			count[ackKey{e.SandboxID, e.StepIndex, e.Event}]++
		}
	}
	if len(o.Witness) == 0 {
		problems = append(problems, "the witness had no append acknowledged")
	}
	n := 0
	for _, a := range o.Witness {
		for i, ev := range a.Events {
			n++
			k := ackKey{a.SandboxID, a.Steps[i], ev}
			if c := count[k]; c != 1 {
				problems = append(problems, fmt.Sprintf("acknowledged %s of witness step %d is in the stream %d time(s)", ev, a.Step, c))
			}
		}
	}
	return fmt.Sprintf("%d acknowledged witness events of %d entries in the stream", n, entries), problems
}

func checkVerify(o *Observation) (string, []string) {
	if o.Verify != "" {
		return "", []string{o.Verify}
	}
	return "verify: tables equal a rebuild of the stream", nil
}

func checkFences(o *Observation) (string, []string) {
	fence := map[string]uint64{}
	var problems []string
	fences, entries := 0, 0
	for _, m := range o.Stream {
		if m.Fence != "" {
			fence[m.Fence] = m.Seq
			fences++
			continue
		}
		if m.Entry == nil {
			continue
		}
		entries++
		id := m.Entry.SandboxID
		epochStr, _, ok := strings.Cut(m.MsgID, ".")
		epoch, err := strconv.ParseUint(epochStr, 10, 64)
		switch {
		case !ok || err != nil:
			problems = append(problems, fmt.Sprintf("entry %d of %s has no writer epoch (message id %q)", m.Seq, id, m.MsgID))
		case fence[id] == 0:
			problems = append(problems, fmt.Sprintf("entry %d of %s recorded before any fence", m.Seq, id))
		case epoch != fence[id]:
			problems = append(problems, fmt.Sprintf("entry %d of %s written under fence %d, after fence %d replaced it", m.Seq, id, epoch, fence[id]))
		}
	}
	return fmt.Sprintf("%d entries under %d fences", entries, fences), problems
}

func checkNothingRunning(o *Observation) (string, []string) {
	var problems []string
	for _, id := range o.SandboxdLive {
		problems = append(problems, "sandboxd: "+id)
	}
	for _, id := range o.ReadModelRunning {
		problems = append(problems, "read model running: "+id)
	}
	return "sandboxd and the read model: none running", problems
}

// expectedFor is the stream's entries an auditor with filter evs must see.
func (o *Observation) expectedFor(evs []events.Event) []Seen {
	var out []Seen
	for _, m := range o.Stream {
		if m.Entry == nil {
			continue
		}
		if len(evs) == 0 || slices.Contains(evs, m.Entry.Event.Canonical()) {
			out = append(out, Seen{Seq: m.Seq, Event: m.Entry.Event})
		}
	}
	return out
}

func checkAuditors(o *Observation) (string, []string) {
	if len(o.Auditors) == 0 {
		return "", []string{"no auditor ran"}
	}
	var problems []string
	total, reconnects := 0, 0
	for _, a := range o.Auditors {
		want := o.expectedFor(a.Events)
		total += len(a.Seen)
		reconnects += a.Reconnects
		if p := compareSeen(a.Seen, want); p != "" {
			problems = append(problems, a.Name+": "+p)
		}
	}
	return fmt.Sprintf("%d auditors, %d events seen, %d reconnects", len(o.Auditors), total, reconnects), problems
}

// compareSeen says how got differs from want ("" when equal).
func compareSeen(got, want []Seen) string {
	wantAt := map[uint64]int{}
	for i, w := range want {
		wantAt[w.Seq] = i
	}
	seen := map[uint64]bool{}
	for i, g := range got {
		switch {
		case seen[g.Seq]:
			return fmt.Sprintf("event %d seen twice", g.Seq)
		case i > 0 && g.Seq < got[i-1].Seq:
			return fmt.Sprintf("event %d after %d: out of order", g.Seq, got[i-1].Seq)
		}
		if _, ok := wantAt[g.Seq]; !ok {
			return fmt.Sprintf("event %d (%s) is not in its filter's stream", g.Seq, g.Event)
		}
		seen[g.Seq] = true
	}
	var missing []uint64
	for _, w := range want {
		if !seen[w.Seq] {
			missing = append(missing, w.Seq)
		}
	}
	if len(missing) > 0 {
		return fmt.Sprintf("%d of %d events missing (first %d, last %d)", len(missing), len(want), missing[0], missing[len(missing)-1])
	}
	return ""
}

// PartitionProgress is one projector partition's last lag and offset.
type PartitionProgress struct {
	Partition int
	Lag       float64
	Offset    uint64
}

func checkLag(o *Observation) (string, []string) {
	last := lastEntrySeq(o.Stream)
	switch {
	case o.LagErr != "":
		return "", []string{o.LagErr}
	case o.Lag != 0:
		return "", []string{fmt.Sprintf("lag %v at the end", o.Lag)}
	case o.Offset < last:
		return "", []string{fmt.Sprintf("projector offset %d, last ledger entry %d", o.Offset, last)}
	}
	var problems, offsets []string
	for _, p := range o.Partitions {
		offsets = append(offsets, strconv.FormatUint(p.Offset, 10))
		if p.Lag != 0 || p.Offset < last {
			problems = append(problems, fmt.Sprintf("partition %d: lag %v, offset %d, last ledger entry %d", p.Partition, p.Lag, p.Offset, last))
		}
	}
	if len(o.Partitions) > 0 {
		return fmt.Sprintf("lag 0, offset %d in each of %d partitions (%s)", o.Offset, len(o.Partitions), strings.Join(offsets, ", ")), problems
	}
	return fmt.Sprintf("lag 0, offset %d", o.Offset), nil
}

// lastEntrySeq is the stream sequence of the last ledger entry of ms (fences
// and undecodable messages aside), 0 for none.
func lastEntrySeq(ms []StreamMsg) uint64 {
	var last uint64
	for _, m := range ms {
		if m.Entry != nil {
			last = m.Seq
		}
	}
	return last
}

func checkCrashes(o *Observation) (string, []string) {
	return "every exit was a fault's", o.Crashes
}
