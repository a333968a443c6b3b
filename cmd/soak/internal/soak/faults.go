package soak

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/alineo-labs/alineo/jobs"
)

// Fault kinds of the schedule.
const (
	FaultKillExecutor  = "kill -9 executor"
	FaultStopExecutor  = "SIGSTOP executor past ack-wait"
	FaultKillNATS      = "kill -9 NATS node"
	FaultKillLeader    = "kill -9 NATS stream leader"
	FaultKillProjector = "kill -9 a projector partition"
	FaultStopPostgres  = "stop Postgres 10s"
	FaultDropAuditor   = "drop an auditor's connection"
	// The multi-host soak's (Config.Hosts).
	FaultKillHost      = "kill -9 every process of a host"
	FaultPartitionHost = "partition a host past ack-wait"
	FaultPartitionNATS = "partition a NATS node"
	FaultStopS3        = "stop the S3 server"
)

// FaultKinds is every fault of the single-host soak, in the order a
// schedule's first round shuffles.
var FaultKinds = []string{FaultKillExecutor, FaultStopExecutor, FaultKillNATS, FaultKillLeader,
	FaultKillProjector, FaultStopPostgres, FaultDropAuditor}

// HostFaultKinds are the faults the multi-host soak adds to FaultKinds.
var HostFaultKinds = []string{FaultKillHost, FaultPartitionHost, FaultPartitionNATS, FaultStopS3}

// faultKinds are the faults of a run of cfg.
func faultKinds(cfg Config) []string {
	if cfg.Hosts > 0 {
		return append(slices.Clone(FaultKinds), HostFaultKinds...)
	}
	return FaultKinds
}

// schedule deals fault kinds in rounds: each round every kind once, in an
// order drawn from rng, so a seed repeats the order (the targets, drawn from
// the same rng, follow it as long as the run's course does).
type schedule struct {
	rng   *rand.Rand
	kinds []string
	round []string
}

// next returns the next fault kind.
func (s *schedule) next() string {
	if len(s.round) == 0 {
		s.round = slices.Clone(s.kinds)
		s.rng.Shuffle(len(s.round), func(i, j int) { s.round[i], s.round[j] = s.round[j], s.round[i] })
	}
	k := s.round[0]
	s.round = s.round[1:]
	return k
}

// FaultRecord is one fault of the run: what, to whom, when, how long the
// system took to make progress again after it was healed.
type FaultRecord struct {
	Kind      string
	Target    string
	At        time.Duration // since the load started
	Healed    time.Duration // from injection until the target was back
	Recovered time.Duration // from healing until a job finished and the projector passed the stream's end at healing; -1 if not seen
	Err       string
}

// faults injects one fault after another until ctx is done: every kind once
// per round, in an order drawn from the seed, each followed by its heal and
// a wait for recovery, then a pause of every.
type faults struct {
	f     *Fleet
	rng   *rand.Rand
	every time.Duration
	start time.Time
	h     *harness

	mu      sync.Mutex
	records []FaultRecord
	losses  []HostLoss
}

func (s *faults) run(ctx context.Context) {
	sched := &schedule{rng: s.rng, kinds: faultKinds(s.f.cfg)}
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
			return
		case <-time.After(s.every):
		}
		if ctx.Err() != nil || s.h.load.open() == 0 {
			if s.h.load.submitting() {
				continue
			}
			return
		}
		kind := sched.next()
		rec := s.inject(kind)
		s.h.logf("fault %-32s %-12s healed in %s, recovered in %s %s", rec.Kind, rec.Target,
			rec.Healed.Round(time.Millisecond), fmtRecovery(rec.Recovered), rec.Err)
		s.mu.Lock()
		s.records = append(s.records, rec)
		s.mu.Unlock()
	}
}

// done returns the faults injected so far.
func (s *faults) done() []FaultRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.records)
}

// hostLosses returns the hosts lost or partitioned so far.
func (s *faults) hostLosses() []HostLoss {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.losses)
}

func fmtRecovery(d time.Duration) string {
	if d < 0 {
		return "(not seen)"
	}
	return d.Round(time.Millisecond).String()
}

// inject injects one fault, heals it and waits for the recovery. A fault
// once begun is healed and waited for even when the load ends: it runs
// under the soak's own context (h.ctx), which only a signal ends.
func (s *faults) inject(kind string) FaultRecord {
	ctx := s.h.ctx
	rec := FaultRecord{Kind: kind, At: time.Since(s.start), Recovered: -1}
	t0 := time.Now()
	var err error
	switch kind {
	case FaultKillExecutor:
		err = s.killExecutor(&rec)
	case FaultStopExecutor:
		err = s.stopExecutor(ctx, &rec)
	case FaultKillNATS, FaultKillLeader:
		err = s.killNATS(ctx, &rec, kind == FaultKillLeader)
	case FaultKillProjector:
		i := s.rng.IntN(len(s.f.Projectors))
		p := s.f.Projectors[i]
		rec.Target = p.Name
		err = s.restart(ctx, p, 2*time.Second)
		if err == nil {
			err = s.f.waitHTTP(ctx, p.Name, "http://"+s.f.Metrics[i]+"/healthz")
		}
	case FaultStopPostgres:
		rec.Target = "postgres"
		if err = s.f.Postgres.Stop(syscall.SIGINT, 60*time.Second); err == nil {
			sleep(ctx, 10*time.Second)
			err = s.f.StartPostgres(ctx)
		}
	case FaultDropAuditor:
		a := s.h.auditors[s.rng.IntN(len(s.h.auditors))]
		rec.Target = a.name
		a.drop()
	case FaultKillHost, FaultPartitionHost:
		err = s.loseHost(ctx, &rec)
	case FaultPartitionNATS:
		err = s.partitionNATS(ctx, &rec)
	case FaultStopS3:
		rec.Target = "s3"
		if err = s.f.stopS3(); err == nil {
			sleep(ctx, s.f.cfg.S3Down)
			err = s.f.StartS3(ctx)
		}
	}
	rec.Healed = time.Since(t0)
	if err != nil {
		rec.Err = err.Error()
		s.h.logf("fault %s: %v", kind, err)
	}
	rec.Recovered = s.h.awaitRecovery(ctx, time.Now())
	return rec
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// restart kills p with SIGKILL and starts it again after pause.
func (s *faults) restart(ctx context.Context, p *Proc, pause time.Duration) error {
	if err := p.Kill(); err != nil {
		return err
	}
	sleep(ctx, pause)
	if err := ctx.Err(); err != nil {
		return err
	}
	return p.Start()
}

// pickExecutor picks a running executor, preferring one none of whose jobs
// is at its last steps.
func (s *faults) pickExecutor() *Proc {
	near := s.h.load.nearEnd()
	var calm, all []*Proc
	for _, e := range s.f.Executors {
		if e.Running() {
			all = append(all, e)
			if !near[e.Name] {
				calm = append(calm, e)
			}
		}
	}
	if len(calm) > 0 {
		return calm[s.rng.IntN(len(calm))]
	}
	if len(all) > 0 {
		return all[s.rng.IntN(len(all))]
	}
	return nil
}

func (s *faults) killExecutor(rec *FaultRecord) error {
	e := s.pickExecutor()
	if e == nil {
		return fmt.Errorf("no executor running")
	}
	rec.Target = e.Name
	return s.restart(s.h.ctx, e, 2*time.Second)
}

// stopExecutor freezes an executor past its lease, so its jobs go to the
// others, then thaws it: whatever it then tries to write must be fenced.
func (s *faults) stopExecutor(ctx context.Context, rec *FaultRecord) error {
	e := s.pickExecutor()
	if e == nil {
		return fmt.Errorf("no executor running")
	}
	rec.Target = e.Name
	if err := e.Signal(syscall.SIGSTOP, false); err != nil {
		return err
	}
	sleep(ctx, s.f.cfg.AckWait+4*time.Second)
	return e.Signal(syscall.SIGCONT, false)
}

// killNATS kills a node (the ledger stream's leader when leader is set) and
// restarts it on its store after 5 s, then waits until every stream has its
// replicas current again, so the next fault never takes a quorum away.
func (s *faults) killNATS(ctx context.Context, rec *FaultRecord, leader bool) error {
	i := s.rng.IntN(len(s.f.NATS))
	if leader {
		if name, err := s.h.streamLeader(ctx); err == nil {
			for j, n := range s.f.NATS {
				if n.Name == name {
					i = j
				}
			}
		} else {
			s.h.logf("stream leader unknown (%v); killing %s", err, s.f.NATS[i].Name)
		}
	}
	n := s.f.NATS[i]
	rec.Target = n.Name
	if err := s.restart(ctx, n, 5*time.Second); err != nil {
		return err
	}
	if err := s.f.waitNATSNode(ctx, i); err != nil {
		return err
	}
	return s.h.awaitReplicas(ctx)
}

// HostLoss is a host the schedule killed or partitioned, and the jobs
// running on it then: each must finish once, on another host, from its
// last checkpoint (checkLostJobs).
type HostLoss struct {
	Kind string // FaultKillHost or FaultPartitionHost
	Host string
	// At is when the host's processes were killed or its link went down,
	// Back when it was back (its sandboxd answering again, or its link up);
	// zero if it never came back.
	At, Back time.Time
	Jobs     []LostJob
}

// LostJob is a job running on a lost host: its status read just before
// the loss.
type LostJob struct {
	ID, Name string
	Status   jobs.Status
}

// pickHost picks, among the hosts whose processes all run, the one with
// the most jobs running on it (ties drawn from the seed), and returns it
// with those jobs' statuses, read fresh.
func (s *faults) pickHost(ctx context.Context) (*Host, []LostJob) {
	running := s.h.load.running(ctx)
	var best []*Host
	most := -1
	for _, h := range s.f.Hosts {
		up := true
		for _, p := range h.procs() {
			up = up && p.Running()
		}
		if !up {
			continue
		}
		n := 0
		for _, j := range running {
			if s.f.hostOf(j.Status.Worker) == h.Name {
				n++
			}
		}
		switch {
		case n > most:
			best, most = []*Host{h}, n
		case n == most:
			best = append(best, h)
		}
	}
	if len(best) == 0 {
		return nil, nil
	}
	h := best[s.rng.IntN(len(best))]
	var lost []LostJob
	for _, j := range running {
		if s.f.hostOf(j.Status.Worker) == h.Name {
			lost = append(lost, j)
		}
	}
	return h, lost
}

// loseHost kills every process of a host and starts it again after
// HostDown, or takes its link down for Partition (past the jobs' lease, so
// they go to other hosts) and up again.
func (s *faults) loseHost(ctx context.Context, rec *FaultRecord) error {
	h, lost := s.pickHost(ctx)
	if h == nil {
		return fmt.Errorf("no host with every process running")
	}
	rec.Target = fmt.Sprintf("%s (%d jobs)", h.Name, len(lost))
	// At is taken once the fault is in place, not before it: the host's
	// executors go on writing while ip(8) or the kills take effect (tens of
	// ms, hundreds under load), and a final step they complete meanwhile
	// was completed before the loss, not after it (a CI run of the soak,
	// seed 866642, counted one as the lost session's after the loss).
	loss := HostLoss{Kind: rec.Kind, Host: h.Name, Jobs: lost}
	defer func() {
		s.mu.Lock()
		s.losses = append(s.losses, loss)
		s.mu.Unlock()
	}()
	if rec.Kind == FaultPartitionHost {
		err := s.f.Net.SetLink(ctx, h.Name, false)
		loss.At = time.Now()
		if err != nil {
			return err
		}
		sleep(ctx, s.f.cfg.Partition)
		// Up again even when ctx ended: a signal's abort then finds the
		// fleet as it was.
		if err := s.f.Net.SetLink(context.WithoutCancel(ctx), h.Name, true); err != nil {
			return err
		}
		loss.Back = time.Now()
		return nil
	}
	err := s.f.killHost(h)
	loss.At = time.Now()
	if err != nil {
		return err
	}
	sleep(ctx, s.f.cfg.HostDown)
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := s.f.startHost(ctx, h); err != nil {
		return err
	}
	loss.Back = time.Now()
	return nil
}

// partitionNATS takes a NATS node's link down for Partition, then up, and
// waits until every stream has its replicas current again.
func (s *faults) partitionNATS(ctx context.Context, rec *FaultRecord) error {
	i := s.rng.IntN(len(s.f.NATS))
	node := fmt.Sprintf("nats%d", i+1)
	rec.Target = s.f.NATS[i].Name
	if err := s.f.Net.SetLink(ctx, node, false); err != nil {
		return err
	}
	sleep(ctx, s.f.cfg.Partition)
	if err := s.f.Net.SetLink(context.WithoutCancel(ctx), node, true); err != nil {
		return err
	}
	return s.h.awaitReplicas(ctx)
}
