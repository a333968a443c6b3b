package soak

import (
	"fmt"
	"strings"
	"testing"

	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/jobs"
)

// stream builds a ledger stream the way bus.Ledger writes it: a fence per
// claim or takeover, each entry's message id <epoch>.<n> under its writer's
// fence.
type stream struct {
	msgs  []StreamMsg
	epoch map[string]uint64
	n     map[string]int
}

func newStream() *stream { return &stream{epoch: map[string]uint64{}, n: map[string]int{}} }

// streamOf continues o's stream.
func streamOf(o *Observation) *stream {
	s := newStream()
	s.msgs = o.Stream
	for _, m := range o.Stream {
		if m.Fence != "" {
			s.epoch[m.Fence] = m.Seq
		} else if m.Entry != nil {
			s.n[m.Entry.SandboxID]++
		}
	}
	return s
}

// settle makes what follows from the stream agree with it, as in a run:
// the auditors saw it, the projector applied it.
func settle(o *Observation) {
	for i := range o.Auditors {
		o.Auditors[i].Seen = o.expectedFor(o.Auditors[i].Events)
	}
	o.Offset = 0
	for _, m := range o.Stream {
		o.Offset = max(o.Offset, m.Seq)
	}
	o.Partitions = []PartitionProgress{{Partition: 0, Offset: o.Offset}, {Partition: 1, Offset: o.Offset}}
}

func (s *stream) next() uint64 { return uint64(len(s.msgs) + 1) }

// tsOf is the time of the stream's message seq: a second apart, from
// 2026-01-01.
func tsOf(seq uint64) int64 { return 1767225600000 + int64(seq)*1000 }

func (s *stream) fence(id string) {
	seq := s.next()
	s.msgs = append(s.msgs, StreamMsg{Seq: seq, Subject: "alineo.fence." + id, Fence: id})
	s.epoch[id] = seq
}

func (s *stream) add(name, id string, step int, ev events.Event, payload any) {
	seq := s.next()
	e := events.New(tsOf(seq), name, id, step, ev, payload)
	e.Seq = seq
	s.n[id]++
	s.msgs = append(s.msgs, StreamMsg{Seq: seq, Subject: "alineo.ledger." + id, MsgID: fmt.Sprintf("%d.%d", s.epoch[id], s.n[id]), Entry: &e})
}

func (s *stream) exec(name, id string, seq int, cmd, stdout string) {
	s.add(name, id, seq, events.ExecStarted, events.ExecStartedPayload{Seq: seq, Cmd: cmd})
	if stdout != "" {
		s.add(name, id, seq, events.ExecOutput, events.NewOutput(seq, events.Stdout, []byte(stdout)))
	}
	s.add(name, id, seq, events.ExecCompleted, events.ExecCompletedPayload{Seq: seq})
}

// goodObservation is a run in which every property holds: job 1 ran through,
// job 2's executor was killed after the checkpoint and another worker fenced
// its session, closed it and resumed in a new one; the witness had two
// batches acknowledged.
func goodObservation() *Observation {
	s := newStream()
	var js []Job
	for n := 1; n <= 2; n++ {
		_, j := jobSpec("t", n)
		id := fmt.Sprintf("sb-%d", n)
		s.fence(id)
		s.add(j.Name, id, events.SandboxLevel, events.SandboxCreated, events.SandboxCreatedPayload{SandboxID: id})
		s.exec(j.Name, id, 1, j.PreCheckpoint[0], "start\n")
		s.exec(j.Name, id, 2, j.PreCheckpoint[1], "")
		s.add(j.Name, id, events.SandboxLevel, events.CheckpointCreated, events.CheckpointCreatedPayload{SnapshotID: "snap", Name: j.Tag})
		final := id
		if n == 2 {
			s.add(j.Name, id, 3, events.ExecStarted, events.ExecStartedPayload{Seq: 3, Cmd: "echo working"}) // killed here
			s.fence(id)                                                                                      // the taker
			s.add(j.Name, id, events.SandboxLevel, events.SandboxClosed, events.SandboxClosedPayload{Reason: events.ClosedTakenOver})
			final = id + "-resumed"
			s.fence(final)
			s.add(j.Name, final, events.SandboxLevel, events.SandboxCreated, events.SandboxCreatedPayload{SandboxID: final, ResumedFrom: id, SnapshotID: "snap"})
		}
		s.exec(j.Name, final, 3, "echo working", "working\n")
		s.exec(j.Name, final, 4, j.FinalCmd, j.Want)
		s.add(j.Name, final, events.SandboxLevel, events.SandboxClosed, nil)
		j.ID = fmt.Sprintf("%032d", n)
		j.Status = jobs.Status{ID: j.ID, Name: j.Name, State: jobs.StateSucceeded, SandboxID: final}
		js = append(js, j)
	}
	o := &Observation{Jobs: js}
	s.fence("w-1")
	s.add(WitnessName, "w-1", events.SandboxLevel, events.SandboxCreated, events.SandboxCreatedPayload{SandboxID: "w-1"})
	o.Witness = append(o.Witness, Acked{SandboxID: "w-1", Step: 0, Events: []events.Event{events.SandboxCreated}, Steps: []int{events.SandboxLevel}})
	s.exec(WitnessName, "w-1", 1, "witness 1", "witness 1\n")
	o.Witness = append(o.Witness, Acked{SandboxID: "w-1", Step: 1,
		Events: []events.Event{events.ExecStarted, events.ExecOutput, events.ExecCompleted}, Steps: []int{1, 1, 1}})
	o.Stream = s.msgs
	for i, f := range auditorFilters {
		o.Auditors = append(o.Auditors, AuditorLog{Name: fmt.Sprintf("a%d", i), Events: f, Seen: o.expectedFor(f)})
	}
	settle(o)
	return o
}

func results(o *Observation) map[string]Result {
	out := map[string]Result{}
	for _, r := range RunChecks(o) {
		out[r.Check] = r
	}
	return out
}

func TestChecksPassOnAGoodRun(t *testing.T) {
	for _, r := range RunChecks(goodObservation()) {
		if !r.Pass {
			t.Errorf("%s: FAIL %s", r.Check, r.Detail)
		}
	}
}

// Each case breaks one property the way a faulty component would and
// expects exactly its check to fail, naming the problem.
func TestEachCheckFailsWhenItsPropertyIsBroken(t *testing.T) {
	cases := []struct {
		name, check, want string
		breakIt           func(o *Observation)
	}{
		{"a job failed", Checks[0].Name, "failed", func(o *Observation) {
			o.Jobs[0].Status.State = jobs.StateFailed
		}},
		{"a duplicated job: a second worker ran it to the end too", Checks[0].Name, "never taken over", func(o *Observation) {
			s := streamOf(o)
			s.fence("zombie")
			s.exec(o.Jobs[0].Name, "zombie", 4, o.Jobs[0].FinalCmd, o.Jobs[0].Want)
			o.Stream = s.msgs
		}},
		{"a wrong result: the snapshot lost a file", Checks[0].Name, "result", func(o *Observation) {
			for _, m := range o.Stream {
				if m.Entry != nil && m.Entry.Event == events.ExecOutput && strings.Contains(string(m.Entry.Payload), "INPUT-1") {
					m.Entry.Payload = []byte(`{"seq":4,"type":"stdout","text":"post-1\n"}`)
				}
			}
		}},
		{"a job finished twice in its session", Checks[0].Name, "completed 2 times", func(o *Observation) {
			s := streamOf(o)
			s.exec(o.Jobs[0].Name, "sb-1", 9, o.Jobs[0].FinalCmd, o.Jobs[0].Want)
			o.Stream = s.msgs
		}},
		{"the job's status names another session", Checks[0].Name, "completed 0 times", func(o *Observation) {
			o.Jobs[1].Status.SandboxID = "sb-2"
		}},
		{"an executor re-runs a replayed step", Checks[1].Name, "1 after the checkpoint", func(o *Observation) {
			s := streamOf(o)
			s.exec(o.Jobs[1].Name, "sb-2-resumed", 5, o.Jobs[1].PreCheckpoint[0], "start\n")
			o.Stream = s.msgs
		}},
		{"a step before the checkpoint ran twice in its session", Checks[1].Name, "2 time(s) in the checkpoint's session", func(o *Observation) {
			e := *o.Stream[2].Entry // job 1's first exec.started
			e.Seq = 999
			o.Stream = append(o.Stream, StreamMsg{Seq: 999, MsgID: "1.99", Entry: &e})
		}},
		{"no checkpoint recorded", Checks[1].Name, "no checkpoint", func(o *Observation) {
			o.Jobs[0].Tag = "other"
		}},
		{"an acknowledged event is not in the stream", Checks[2].Name, "0 time(s)", func(o *Observation) {
			o.Stream = dropWhere(o.Stream, func(m StreamMsg) bool {
				return m.Entry != nil && m.Entry.Name == WitnessName && m.Entry.Event == events.ExecOutput
			})
		}},
		{"an entry stored twice", Checks[2].Name, "stored twice", func(o *Observation) {
			m := o.Stream[3]
			m.Seq = 1000
			o.Stream = append(o.Stream, m)
		}},
		{"a message that does not decode", Checks[2].Name, "does not decode", func(o *Observation) {
			o.Stream = append(o.Stream, StreamMsg{Seq: 1001, Subject: "alineo.ledger.x", DecodeErr: "bad json"})
		}},
		{"the tables differ from the ledger", Checks[3].Name, "differs", func(o *Observation) {
			o.Verify = "projector verify: exit status 1: postgres differs from a rebuild of the stream"
		}},
		{"a fenced writer wrote after its fence", Checks[4].Name, "after fence", func(o *Observation) {
			// sb-2's first writer (epoch 1... its first fence) writes once more
			// after the taker's fence.
			var first uint64
			for _, m := range o.Stream {
				if m.Fence == "sb-2" {
					first = m.Seq
					break
				}
			}
			e := events.New(2, o.Jobs[1].Name, "sb-2", 3, events.ExecCompleted, events.ExecCompletedPayload{Seq: 3})
			e.Seq = 2000
			o.Stream = append(o.Stream, StreamMsg{Seq: 2000, Subject: "alineo.ledger.sb-2", MsgID: fmt.Sprintf("%d.50", first), Entry: &e})
		}},
		{"an entry before any fence", Checks[4].Name, "before any fence", func(o *Observation) {
			e := events.New(2, "x", "unfenced", events.SandboxLevel, events.SandboxCreated, events.SandboxCreatedPayload{SandboxID: "unfenced"})
			o.Stream = append(o.Stream, StreamMsg{Seq: 2001, MsgID: "5.1", Entry: &e})
		}},
		{"a sandbox left running on sandboxd", Checks[5].Name, "sandboxd", func(o *Observation) {
			o.SandboxdLive = []string{"abc Running"}
		}},
		{"a session running in the read model", Checks[5].Name, "read model", func(o *Observation) {
			o.ReadModelRunning = []string{"soak-t-1/sb-1"}
		}},
		{"a dropped event", Checks[6].Name, "missing", func(o *Observation) {
			a := &o.Auditors[0]
			a.Seen = append(a.Seen[:4:4], a.Seen[5:]...)
		}},
		{"an event delivered twice", Checks[6].Name, "twice", func(o *Observation) {
			a := &o.Auditors[0]
			a.Seen = append(a.Seen[:5:5], a.Seen[4:]...)
		}},
		{"events out of order", Checks[6].Name, "out of order", func(o *Observation) {
			a := &o.Auditors[1]
			a.Seen[0], a.Seen[1] = a.Seen[1], a.Seen[0]
		}},
		{"an event outside the filter", Checks[6].Name, "not in its filter", func(o *Observation) {
			a := &o.Auditors[1] // exec.started only
			a.Seen = append([]Seen{{Seq: 2, Event: events.SandboxCreated}}, a.Seen...)
		}},
		{"the projector did not catch up", Checks[7].Name, "lag 3", func(o *Observation) {
			o.Lag = 3
		}},
		{"the projector stopped short of the stream", Checks[7].Name, "offset", func(o *Observation) {
			o.Offset--
		}},
		{"one projector partition stopped short of the stream", Checks[7].Name, "partition 1: lag 0, offset", func(o *Observation) {
			o.Partitions[1].Offset--
		}},
		{"one projector partition lags", Checks[7].Name, "partition 0: lag 2", func(o *Observation) {
			o.Partitions[0].Lag = 2
		}},
		{"a process crashed", Checks[8].Name, "exited by itself", func(o *Observation) {
			o.Crashes = []string{"api (pid 7) exited by itself: exit status 2"}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := goodObservation()
			c.breakIt(o)
			if c.check != Checks[6].Name && c.check != Checks[7].Name {
				settle(o)
			}
			for name, r := range results(o) {
				switch {
				case name == c.check && r.Pass:
					t.Errorf("%s passed; want it to fail", name)
				case name == c.check && !strings.Contains(r.Detail, c.want):
					t.Errorf("%s: detail %q, want it to mention %q", name, r.Detail, c.want)
				case name != c.check && !r.Pass:
					t.Errorf("%s failed too: %s", name, r.Detail)
				}
			}
		})
	}
}

func dropWhere(ms []StreamMsg, drop func(StreamMsg) bool) []StreamMsg {
	var out []StreamMsg
	for _, m := range ms {
		if !drop(m) {
			out = append(out, m)
		}
	}
	return out
}

func TestChecksRefuseAnEmptyRun(t *testing.T) {
	r := results(&Observation{})
	for _, name := range []string{Checks[0].Name, Checks[2].Name, Checks[6].Name} {
		if r[name].Pass {
			t.Errorf("%s passed on a run with nothing in it", name)
		}
	}
}

func TestReportPrintsSeedOnFailure(t *testing.T) {
	o := goodObservation()
	o.Lag = 1
	rep := &Report{Seed: 4242, Results: RunChecks(o), Dir: "/tmp/x", Faults: []FaultRecord{{Kind: "kill -9 executor", Target: "executor-1"}}}
	var b strings.Builder
	rep.Print(&b)
	if rep.Passed() || !strings.Contains(b.String(), "-seed 4242") || !strings.Contains(b.String(), "FAIL") {
		t.Fatalf("report:\n%s", b.String())
	}
	// The failed check's problems come again after the faults table, where
	// the tail of a log (what CI shows) has them.
	out := b.String()
	faults := strings.Index(out, "executor-1")
	failed := strings.LastIndex(out, "failed: "+Checks[7].Name)
	if faults < 0 || failed < faults || !strings.Contains(out[failed:], "lag") {
		t.Fatalf("the failed check is not repeated after the faults:\n%s", out)
	}
}

// A job whose lease lapsed after its final step (its ack lost in a NATS
// failover) is taken over and resumed from its checkpoint: the final step
// runs again in a new session, the first one fenced. That is the contract
// (steps after a checkpoint are at-least-once) and passes.
func TestJobFinishedAgainAfterATakeoverPasses(t *testing.T) {
	o := goodObservation()
	s := streamOf(o)
	j := &o.Jobs[0]
	s.fence("sb-1") // the next attempt takes sb-1 over
	s.fence("sb-1-again")
	s.add(j.Name, "sb-1-again", events.SandboxLevel, events.SandboxCreated, events.SandboxCreatedPayload{SandboxID: "sb-1-again", ResumedFrom: "sb-1"})
	s.exec(j.Name, "sb-1-again", 3, "echo working", "working\n")
	s.exec(j.Name, "sb-1-again", 4, j.FinalCmd, j.Want)
	s.add(j.Name, "sb-1-again", events.SandboxLevel, events.SandboxClosed, nil)
	o.Stream = s.msgs
	j.Status.SandboxID = "sb-1-again"
	settle(o)
	for _, r := range RunChecks(o) {
		if !r.Pass {
			t.Errorf("%s: FAIL %s", r.Check, r.Detail)
		}
	}
	if d := results(o)[Checks[0].Name].Detail; !strings.Contains(d, "1 re-run") {
		t.Errorf("detail %q, want it to count the re-run", d)
	}
}
