package soak

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/jobs"
)

// HostChecks are the multi-host soak's checks, after Checks in its table.
var HostChecks = []Check{
	{"every job of a lost host finished once, elsewhere, from its checkpoint", checkLostJobs},
	{"every blob a checkpoint references is in its bucket", checkBlobs},
	{"every host back, no sandbox left running on any", checkHostsClean},
}

// CheckpointRefs is one checkpoint of a checkpoint store and the blob keys
// it references.
type CheckpointRefs struct {
	Store string // the store's name: "shared", or a host's name
	ID    string
	Keys  []string
}

// finish is one completion of a job's final step.
type finish struct {
	session string
	seq     uint64 // stream sequence of its exec.completed
	ts      int64  // and its time, Unix ms
}

// finishes returns every successful completion of j's final step in the
// sessions ss.
func finishes(j Job, ss []*session) []finish {
	var out []finish
	for _, s := range ss {
		started := map[int]bool{}
		for _, e := range s.entries {
			switch e.Event {
			case events.ExecStarted:
				var p events.ExecStartedPayload
				if e.Decode(&p) == nil && p.Text() == j.FinalCmd {
					started[p.Seq] = true
				}
			case events.ExecCompleted:
				var p events.ExecCompletedPayload
				if e.Decode(&p) == nil && started[p.Seq] && p.ExitCode == 0 {
					out = append(out, finish{session: s.id, seq: e.Seq, ts: e.Ts})
				}
			}
		}
	}
	return out
}

// created is a session's sandbox.created: when, and from which snapshot.
type created struct {
	session  string
	seq      uint64
	ts       int64
	snapshot string
}

func creations(ss []*session) []created {
	var out []created
	for _, s := range ss {
		for _, e := range s.entries {
			var p events.SandboxCreatedPayload
			if e.Event == events.SandboxCreated && e.Decode(&p) == nil {
				out = append(out, created{session: s.id, seq: e.Seq, ts: e.Ts, snapshot: p.SnapshotID})
			}
		}
	}
	slices.SortFunc(out, func(a, b created) int { return cmp.Compare(a.seq, b.seq) })
	return out
}

// lastCheckpointBefore is the snapshot id of the last checkpoint tagged
// tag recorded in ss before the stream sequence seq; "" when none.
func lastCheckpointBefore(ss []*session, tag string, seq uint64) string {
	var id string
	var at uint64
	for _, s := range ss {
		for _, e := range s.entries {
			var p events.CheckpointCreatedPayload
			if e.Event == events.CheckpointCreated && e.Seq < seq && e.Seq > at && e.Decode(&p) == nil && p.Name == tag {
				id, at = p.SnapshotID, e.Seq
			}
		}
	}
	return id
}

// checkLostJobs: every job running on a host when the schedule killed or
// partitioned it succeeded; its final step completed after the loss
// exactly once in a session no later fence superseded, that session being
// the one its status names, on an executor of another host; the lost
// session never completed it after the loss; and the finishing session
// was created from the job's last checkpoint before it (or fresh, when the
// job had none). A job whose final step completed on the lost host before
// the loss is counted apart. A run without a lost job fails: it checked
// nothing.
func checkLostJobs(o *Observation) (string, []string) {
	sessions := o.byName()
	lastFence := map[string]uint64{}
	for _, m := range o.Stream {
		if m.Fence != "" {
			lastFence[m.Fence] = m.Seq
		}
	}
	byID := map[string]Job{}
	for _, j := range o.Jobs {
		byID[j.ID] = j
	}
	var problems []string
	checked, before, resumed := 0, 0, 0
	for _, loss := range o.HostLosses {
		at := loss.At.UnixMilli()
		for _, lj := range loss.Jobs {
			j, ok := byID[lj.ID]
			if !ok {
				problems = append(problems, fmt.Sprintf("%s: lost on %s, not among the run's jobs", lj.Name, loss.Host))
				continue
			}
			ss := sessions[j.Name]
			fs := finishes(j, ss)
			lost := lj.Status.SandboxID
			if slices.ContainsFunc(fs, func(f finish) bool { return f.session == lost && f.ts <= at }) {
				before++ // it finished on the host just before the loss
				continue
			}
			checked++
			pre := fmt.Sprintf("%s (on %s, session %s, when %s)", j.Name, loss.Host, lost, loss.Kind)
			if j.Status.State != jobs.StateSucceeded {
				problems = append(problems, fmt.Sprintf("%s: %s %s", pre, j.Status.State, j.Status.Error))
				continue
			}
			if h := o.ExecutorHosts[j.Status.Worker]; h == loss.Host || h == "" {
				problems = append(problems, fmt.Sprintf("%s: finished by %s, on host %q, not another host", pre, j.Status.Worker, h))
			}
			if j.Status.SandboxID == lost {
				problems = append(problems, pre+": finished in the lost session")
			}
			final := 0
			for _, f := range fs {
				switch {
				case f.ts <= at:
				case f.session == lost:
					problems = append(problems, fmt.Sprintf("%s: the lost session completed the final step after the loss (entry %d)", pre, f.seq))
				case lastFence[f.session] > f.seq:
					// finished, then taken over: superseded
				default:
					final++
				}
			}
			if final != 1 {
				problems = append(problems, fmt.Sprintf("%s: final step completed %d times after the loss in sessions never taken over, want 1", pre, final))
			}
			cs := creations(ss)
			i := slices.IndexFunc(cs, func(c created) bool { return c.session == j.Status.SandboxID })
			if i < 0 {
				problems = append(problems, fmt.Sprintf("%s: no sandbox.created of its finishing session %s", pre, j.Status.SandboxID))
				continue
			}
			c := cs[i]
			want := lastCheckpointBefore(ss, j.Tag, c.seq)
			switch {
			case c.snapshot != want && want == "":
				problems = append(problems, fmt.Sprintf("%s: finishing session %s restored %s, but no checkpoint was taken before it", pre, c.session, c.snapshot))
			case c.snapshot != want:
				problems = append(problems, fmt.Sprintf("%s: finishing session %s started from %q, not from its last checkpoint %s", pre, c.session, c.snapshot, want))
			case want != "":
				resumed++
			}
		}
	}
	if checked+before == 0 {
		problems = append(problems, fmt.Sprintf("no job was running on a lost or partitioned host (%d losses)", len(o.HostLosses)))
	}
	return fmt.Sprintf("%d jobs of %d lost hosts finished once elsewhere (%d resumed from their checkpoint, %d finished just before the loss)",
		checked, len(o.HostLosses), resumed, before), problems
}

// checkBlobs: the stores could be listed, they hold checkpoints, and every
// blob key a checkpoint references is in its store's bucket.
func checkBlobs(o *Observation) (string, []string) {
	problems := slices.Clone(o.BlobsErr)
	if len(o.Checkpoints) == 0 {
		problems = append(problems, "no checkpoint in the checkpoint stores")
	}
	refs := 0
	for _, c := range o.Checkpoints {
		for _, k := range c.Keys {
			refs++
			if !o.Blobs[c.Store][k] {
				problems = append(problems, fmt.Sprintf("checkpoint %s (%s) references blob %s, which is not in its bucket", c.ID, c.Store, k))
			}
		}
	}
	stored := 0
	for _, b := range o.Blobs {
		stored += len(b)
	}
	return fmt.Sprintf("%d checkpoints, %d blob references, all among the %d blobs stored", len(o.Checkpoints), refs, stored), problems
}

// checkHostsClean: every host's sandboxd answers (every host is back) and
// has no sandbox in a state other than Terminated or Failed.
func checkHostsClean(o *Observation) (string, []string) {
	var problems []string
	for _, h := range o.Hosts {
		if err := o.HostErrs[h]; err != "" {
			problems = append(problems, fmt.Sprintf("%s: not back: %s", h, err))
		}
		for _, s := range o.HostSandboxes[h] {
			problems = append(problems, fmt.Sprintf("%s: sandbox %s", h, s))
		}
	}
	if len(o.Hosts) == 0 {
		problems = append(problems, "no host")
	}
	return fmt.Sprintf("%d hosts back, no sandbox running on any", len(o.Hosts)), problems
}

// Recovery is the time from a host's loss to one of its jobs running again
// on another host.
type Recovery struct {
	Job, Host string
	Took      time.Duration // -1: never seen running elsewhere
}

// recoveries measures, for every job of a lost host that had not finished
// before the loss, the time from the loss to the job running again on
// another host: the creation of its first session after the loss while the
// host was still down (a killed host writes nothing, a partitioned one
// reaches no ledger), else, when the session that finished it is another
// host's, that session's creation. Times are the entries' (Unix ms: the
// executors' clocks, this machine's).
func recoveries(o *Observation) []Recovery {
	sessions := o.byName()
	byID := map[string]Job{}
	for _, j := range o.Jobs {
		byID[j.ID] = j
	}
	var out []Recovery
	for _, loss := range o.HostLosses {
		at, back := loss.At.UnixMilli(), loss.Back.UnixMilli()
		for _, lj := range loss.Jobs {
			ss := sessions[lj.Name]
			j := byID[lj.ID]
			if slices.ContainsFunc(finishes(j, ss), func(f finish) bool { return f.session == lj.Status.SandboxID && f.ts <= at }) {
				continue
			}
			r := Recovery{Job: lj.Name, Host: loss.Host, Took: -1}
			for _, c := range creations(ss) {
				down := c.ts > at && (loss.Back.IsZero() || c.ts < back)
				final := c.ts > at && c.session == j.Status.SandboxID && o.ExecutorHosts[j.Status.Worker] != loss.Host
				if c.session != lj.Status.SandboxID && (down || final) {
					r.Took = time.Duration(c.ts-at) * time.Millisecond
					break
				}
			}
			out = append(out, r)
		}
	}
	return out
}
