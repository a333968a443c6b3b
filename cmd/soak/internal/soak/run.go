package soak

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/alineo-labs/alineo/bus"
	"github.com/alineo-labs/alineo/jobs"
)

// Config is a soak run. The zero value of each field takes the default.
type Config struct {
	// Dir holds every process's data and logs (logs/). Default a new
	// temporary directory, removed after a passing run unless Keep.
	Dir  string
	Keep bool
	// BinDir holds prebuilt sandboxd, executor, projector and api; default:
	// built into Dir/bin from the module in the working directory.
	BinDir string
	// Self is the soak binary, run as each NATS node (NATSNodeCommand).
	// Default os.Executable.
	Self string
	// Jobs is the number of jobs (default 200 when Duration is 0). With
	// Duration set and Jobs 0, jobs are submitted until Duration passes;
	// with both, the Jobs are spread over Duration.
	Jobs     int
	Duration time.Duration
	// Inflight bounds the jobs submitted and not finished. Default 8: the
	// executors' slots, so 200 jobs last long enough for a round of faults.
	Inflight int
	// Executors (default 4) each run Concurrency jobs at once (default 2).
	Executors, Concurrency int
	// Projectors is the number of projector partitions, each its own
	// process (cmd/projector --partitions N --partition I). Default 2.
	Projectors int
	// Auditors is the number of SSE auditors (default 20).
	Auditors int
	// Seed draws the fault schedule; 0 picks one (printed).
	Seed int64
	// FaultEvery is the pause between faults (default 5 s).
	FaultEvery time.Duration
	// AckWait is the executors' job lease (default 6 s).
	AckWait time.Duration
	// NoIsolation runs sandboxd with --no-isolation (no runc).
	NoIsolation bool

	// Hosts, when above 0, runs the multi-host soak: a network of
	// namespaces on a bridge (netns.go), each host a namespace with its own
	// sandboxd and ExecutorsPerHost executors (default 2; Executors is
	// then ignored), each NATS node, Postgres, the S3 server and the
	// services in namespaces of their own, and the host faults in the
	// schedule. 0 is the single-host soak on loopback.
	Hosts, ExecutorsPerHost int
	// LocalStorage keeps each host's snapshots on its own disk (sandboxd's
	// defaults) instead of giving every sandboxd the shared checkpoint
	// store (--checkpoints, in the fleet's Postgres) and bucket (--blobs,
	// the S3 server): a checkpoint then cannot be restored on another host.
	LocalStorage bool
	// HostDown is how long a killed host stays down (default 30 s);
	// Partition how long a partitioned host's or NATS node's link stays
	// down (default AckWait + 10 s, past the jobs' lease); S3Down how long
	// the S3 server stays stopped (default 10 s).
	HostDown, Partition, S3Down time.Duration
	// S3Bin is the S3 server, versitygw (default: found on PATH,
	// /usr/local/bin or GOPATH/bin).
	S3Bin string
	// NetPrefix names the network's namespaces, link and lock (default
	// DefaultNetPrefix); Subnet is its subnet, inside TestRange (default
	// DefaultSubnet); NetRoot the directory of its namespaces' files
	// (default NetRoot).
	NetPrefix string
	Subnet    netip.Prefix
	NetRoot   string
	// ReadyTimeout bounds each wait for a process to answer (default 2 min);
	// SettleTimeout each wait of the end (default 3 min); Timeout the load
	// (default 30 min plus Duration).
	ReadyTimeout, SettleTimeout, Timeout time.Duration
	// Out receives the progress lines and the report. Default os.Stdout.
	Out io.Writer
}

func (c *Config) defaults() {
	if c.Jobs == 0 && c.Duration == 0 {
		c.Jobs = 200
	}
	def := func(p *int, v int) {
		if *p == 0 {
			*p = v
		}
	}
	defD := func(p *time.Duration, v time.Duration) {
		if *p == 0 {
			*p = v
		}
	}
	def(&c.Inflight, 8)
	def(&c.Executors, 4)
	def(&c.Concurrency, 2)
	def(&c.Projectors, 2)
	def(&c.Auditors, 20)
	defD(&c.FaultEvery, 5*time.Second)
	defD(&c.AckWait, 6*time.Second)
	def(&c.ExecutorsPerHost, 2)
	defD(&c.HostDown, 30*time.Second)
	defD(&c.Partition, c.AckWait+10*time.Second)
	defD(&c.S3Down, 10*time.Second)
	if c.NetPrefix == "" {
		c.NetPrefix = DefaultNetPrefix
	}
	if !c.Subnet.IsValid() {
		c.Subnet = DefaultSubnet
	}
	if c.NetRoot == "" {
		c.NetRoot = NetRoot
	}
	defD(&c.ReadyTimeout, 2*time.Minute)
	defD(&c.SettleTimeout, 3*time.Minute)
	defD(&c.Timeout, 30*time.Minute+c.Duration)
	if c.Seed == 0 {
		c.Seed = time.Now().UnixNano()%1_000_000 + 1
	}
	if c.Out == nil {
		c.Out = os.Stdout
	}
}

func (c *Config) logf(format string, args ...any) {
	fmt.Fprintf(c.Out, "soak %s  %s\n", time.Now().UTC().Format("15:04:05"), fmt.Sprintf(format, args...))
}

// Report is a run's outcome.
type Report struct {
	Seed int64
	// Hosts is the multi-host soak's host count; 0 for the single-host soak.
	Hosts   int
	Results []Result
	Faults  []FaultRecord
	Figures Figures
	Dir     string
	// Interrupted, when set, says what stopped the run before its checks
	// (the signal, and the phase it came in); Results is then empty.
	Interrupted string
}

// Passed reports whether every check passed.
func (r *Report) Passed() bool {
	if r.Interrupted != "" {
		return false
	}
	for _, c := range r.Results {
		if !c.Pass {
			return false
		}
	}
	return len(r.Results) > 0
}

// Figures are the run's numbers.
type Figures struct {
	Jobs, Events      int
	Submitted         int // jobs submitted (an interrupted run's Jobs are those finished)
	Elapsed           time.Duration
	LagP50, LagP99    float64
	LagSamples        int
	WitnessFailed     int
	AuditorReconnects int
	Processes         int
	// HostRecoveries are the times from a host's loss to each of its jobs
	// running again on another host (multi-host runs), p50 and p99 of those
	// seen; HostRecoveriesUnseen counts the jobs never seen running again.
	HostRecoveries                           []Recovery
	HostRecoveryP50, HostRecoveryP99         time.Duration
	HostRecoveriesSeen, HostRecoveriesUnseen int
}

// hostRecoveryFigures sums up rs.
func (fg *Figures) hostRecoveryFigures(rs []Recovery) {
	fg.HostRecoveries = rs
	var seen []float64
	for _, r := range rs {
		if r.Took < 0 {
			fg.HostRecoveriesUnseen++
			continue
		}
		seen = append(seen, float64(r.Took))
	}
	fg.HostRecoveriesSeen = len(seen)
	fg.HostRecoveryP50 = time.Duration(percentile(seen, 0.5))
	fg.HostRecoveryP99 = time.Duration(percentile(seen, 0.99))
}

// harness is a run in progress.
type harness struct {
	cfg      Config
	ctx      context.Context // Run's: done on a signal, which stops every phase at once
	phase    atomic.Value    // string: what the run is doing, for an interruption's report
	f        *Fleet
	b        *bus.Bus
	q        *jobs.Queue
	load     *load
	sched    *faults
	auditors []*auditor
	wit      *witness

	mu  sync.Mutex
	lag []float64
}

func (h *harness) logf(format string, args ...any) { h.cfg.logf(format, args...) }

// Run runs a soak and returns its report; the error is for a run that could
// not be made (a process that never started), not for a failed check.
//
// When ctx ends (cmd/soak: SIGINT or SIGTERM) in any phase, the run stops
// at once: every process is killed or, sandboxd and Postgres, given a short
// shutdown, and reaped; what sandboxd left mounted is unmounted; the report
// holds the faults and figures so far (Interrupted set) and the error wraps
// ErrInterrupted. The directory is kept.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg.defaults()
	if cfg.Dir == "" {
		d, err := os.MkdirTemp("", "alineo-soak-")
		if err != nil {
			return nil, err
		}
		cfg.Dir = d
	}
	if cfg.Self == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, err
		}
		cfg.Self = exe
	}
	if err := os.MkdirAll(filepath.Join(cfg.Dir, "logs"), 0o755); err != nil {
		return nil, err
	}
	// Postgres (as its own user) must reach its directory below Dir.
	_ = os.Chmod(cfg.Dir, 0o755)
	cfg.logf("seed %d, dir %s", cfg.Seed, cfg.Dir)
	h := &harness{cfg: cfg, ctx: ctx}
	// A panic of this goroutine still removes the network (a panic of
	// another leaves it to the janitor).
	defer h.closeNetwork()
	h.setPhase("starting the fleet")
	rep, err := h.run(ctx)
	if h.f != nil {
		h.stopFleet(ctx)
		h.closeNetwork()
	}
	if ctx.Err() != nil {
		cause := context.Cause(ctx)
		if rep == nil {
			rep = h.interruptedReport()
		}
		rep.Interrupted = fmt.Sprintf("%v while %s", cause, h.getPhase())
		rep.Dir = cfg.Dir
		return rep, fmt.Errorf("%w: %s", ErrInterrupted, rep.Interrupted)
	}
	if rep != nil {
		rep.Dir = cfg.Dir
		if rep.Passed() && !cfg.Keep && err == nil {
			removeUnlessMounted(cfg)
		}
	}
	return rep, err
}

// removeUnlessMounted removes Dir, unless something is still mounted below
// it (a sandboxd that did not clean up): a removal would then descend into
// the mounts, which include idmapped views of the host's directories.
func removeUnlessMounted(cfg Config) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		cfg.logf("kept %s: %v", cfg.Dir, err)
		return
	}
	dir := filepath.Clean(cfg.Dir) + "/"
	for line := range strings.SplitSeq(string(data), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4]+"/", dir) {
			cfg.logf("kept %s: %s is still mounted", cfg.Dir, f[4])
			return
		}
	}
	_ = os.RemoveAll(cfg.Dir)
}

// stopFleet stops the fleet: gracefully (shutdown) unless ctx is done, or
// becomes done while it stops, when it aborts.
func (h *harness) stopFleet(ctx context.Context) {
	if ctx.Err() == nil {
		h.logf("stopping the fleet")
		done := make(chan struct{})
		go func() { defer close(done); h.f.shutdown() }()
		select {
		case <-done:
			return
		case <-ctx.Done():
		}
		defer func() { <-done }() // shutdown's waits end as abort kills
	}
	h.logf("interrupted (%v): killing the fleet", context.Cause(ctx))
	h.f.abort()
}

// closeNetwork removes the multi-host soak's network, once the fleet is
// stopped (or, after a panic, by the janitor's kill).
func (h *harness) closeNetwork() {
	if h.f == nil || h.f.Net == nil {
		return
	}
	if err := h.f.Net.Close(); err != nil {
		h.logf("%v", err)
	}
	h.f.Net = nil
}

func (h *harness) setPhase(p string) { h.phase.Store(p) }

func (h *harness) getPhase() string {
	p, _ := h.phase.Load().(string)
	return p
}

// interruptedReport is the report of a run stopped before its checks: the
// faults so far and the figures the load and the lag sampler have.
func (h *harness) interruptedReport() *Report {
	rep := &Report{Seed: h.cfg.Seed, Hosts: h.cfg.Hosts}
	if h.sched != nil {
		rep.Faults = h.sched.done()
	}
	if l := h.load; l != nil {
		l.mu.Lock()
		rep.Figures.Submitted, rep.Figures.Jobs = len(l.jobs), l.done
		start := l.start
		l.mu.Unlock()
		rep.Figures.Elapsed = time.Since(start)
	}
	h.mu.Lock()
	rep.Figures.LagP50, rep.Figures.LagP99, rep.Figures.LagSamples = percentile(h.lag, 0.5), percentile(h.lag, 0.99), len(h.lag)
	h.mu.Unlock()
	if h.wit != nil {
		_, rep.Figures.WitnessFailed = h.wit.result()
	}
	for _, a := range h.auditors {
		rep.Figures.AuditorReconnects += a.log().Reconnects
	}
	if h.f != nil {
		rep.Figures.Processes = len(h.f.All())
	}
	return rep
}

func (h *harness) run(ctx context.Context) (*Report, error) {
	cfg := h.cfg
	f, err := startFleet(ctx, cfg)
	h.f = f // what started, to stop even when the rest did not
	if err != nil {
		return nil, fmt.Errorf("start: %w (logs in %s)", err, filepath.Join(cfg.Dir, "logs"))
	}
	// The soak creates the streams R3 before any binary opens them.
	bc := bus.Config{URL: f.NATSURL(), Replicas: Replicas, SetupTimeout: cfg.ReadyTimeout}
	if cfg.Hosts > 0 {
		// The soak watches: a partitioned NATS node must not hold its
		// connection for the default 2 minutes of pings.
		bc.Options = []nats.Option{nats.PingInterval(2 * time.Second), nats.MaxPingsOutstanding(2)}
	}
	h.b, err = bus.Open(ctx, bc)
	if err != nil {
		return nil, err
	}
	defer h.b.Close()
	if err := poll(ctx, "jobs queue", cfg.ReadyTimeout, 500*time.Millisecond, func() (bool, error) {
		h.q, err = jobs.OpenQueue(ctx, h.b.JetStream(), jobs.QueueConfig{Replicas: Replicas, AckWait: cfg.AckWait})
		return err == nil, err
	}); err != nil {
		return nil, err
	}
	if err := f.startServices(ctx); err != nil {
		return nil, fmt.Errorf("start: %w (logs in %s)", err, filepath.Join(cfg.Dir, "logs"))
	}
	h.setPhase("running the load")
	if cfg.Hosts > 0 {
		cfg.logf("fleet up: NATS %s, Postgres, S3 %s (shared storage %t), %d hosts of a sandboxd and %d executors, %d projector partitions, API %s",
			f.NATSURL(), f.S3Endpoint, !cfg.LocalStorage, len(f.Hosts), cfg.ExecutorsPerHost, len(f.Projectors), f.APIURL)
	} else {
		cfg.logf("fleet up: NATS %s, Postgres, sandboxd %s, %d executors, %d projector partitions, API %s",
			f.NATSURL(), f.SandboxURL, len(f.Executors), len(f.Projectors), f.APIURL)
	}

	bg, stopBg := context.WithCancel(context.WithoutCancel(ctx))
	defer stopBg()
	var wg sync.WaitGroup
	if err := h.startAuditors(bg, &wg); err != nil {
		return nil, err
	}
	wctx, stopWitness := context.WithCancel(bg)
	h.wit = &witness{b: h.b, id: fmt.Sprintf("w-%d", cfg.Seed), logf: h.logf}
	witErr := make(chan error, 1)
	go func() { witErr <- h.wit.run(wctx) }()
	wg.Add(1)
	go func() { defer wg.Done(); h.sampleLag(bg) }()

	run := fmt.Sprintf("%d", cfg.Seed)
	start := time.Now()
	h.load = &load{q: h.q, run: run, total: cfg.Jobs, start: start, until: start.Add(cfg.Duration), inflight: cfg.Inflight, logf: h.logf}
	fctx, stopFaults := context.WithCancel(bg)
	sched := &faults{f: f, rng: rand.New(rand.NewPCG(uint64(cfg.Seed), 18)), every: cfg.FaultEvery, start: start, h: h}
	h.sched = sched
	faultsDone := make(chan struct{})
	go func() { defer close(faultsDone); sched.run(fctx) }()

	lctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	loadErr := h.load.runLoad(lctx)
	cancel()
	elapsed := time.Since(start)
	stopFaults()
	<-faultsDone
	if loadErr != nil {
		h.logf("load: %v", loadErr)
	}
	stopWitness()
	if err := <-witErr; err != nil {
		h.logf("%v", err)
	}
	if ctx.Err() != nil {
		stopBg()
		wg.Wait()
		return nil, ctx.Err()
	}
	h.setPhase("settling")
	h.logf("load done in %s; settling", elapsed.Round(time.Second))
	obs := h.observe(ctx)
	stopBg()
	wg.Wait()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	h.setPhase("checking")
	rep := &Report{Seed: cfg.Seed, Hosts: cfg.Hosts, Results: RunChecks(obs), Faults: sched.done()}
	rep.Figures = h.figures(obs, elapsed)
	return rep, nil
}

func (h *harness) startAuditors(ctx context.Context, wg *sync.WaitGroup) error {
	for i := range h.cfg.Auditors {
		a := &auditor{name: fmt.Sprintf("auditor-%02d", i+1), api: h.f.APIURL, token: h.f.APIToken, filter: auditorFilters[i%len(auditorFilters)]}
		h.auditors = append(h.auditors, a)
		wg.Add(1)
		go func() { defer wg.Done(); a.run(ctx) }()
	}
	// Connected before the first event: each must see every one of its filter.
	return poll(ctx, "auditors connected", h.cfg.ReadyTimeout, 50*time.Millisecond, func() (bool, error) {
		for _, a := range h.auditors {
			if !a.isConnected() {
				return false, errors.New(a.name + " not connected")
			}
		}
		return true, nil
	})
}

func (h *harness) sampleLag(ctx context.Context) {
	for ctx.Err() == nil {
		if m, _, err := h.f.projectorMetrics(); err == nil {
			h.mu.Lock()
			h.lag = append(h.lag, m.lag)
			h.mu.Unlock()
		}
		sleep(ctx, time.Second)
	}
}

// awaitRecovery waits (up to 2 minutes) until, after healed, a job finished
// (or none is left) and the projector applied the stream as it was at
// healed; it returns how long that took, -1 if it did not happen.
func (h *harness) awaitRecovery(ctx context.Context, healed time.Time) time.Duration {
	var target uint64
	_ = poll(ctx, "stream end", time.Minute, 250*time.Millisecond, func() (bool, error) {
		seq, err := h.b.LastSeq(ctx)
		target = seq
		return err == nil, err
	})
	err := poll(ctx, "recovery", 2*time.Minute, 250*time.Millisecond, func() (bool, error) {
		if h.load.succeededSince(healed) == 0 && h.load.open() > 0 {
			return false, nil
		}
		m, _, err := h.f.projectorMetrics()
		return err == nil && m.offset >= target, err
	})
	if err != nil {
		return -1
	}
	return time.Since(healed)
}

// streamLeader names the NATS node leading the ledger stream.
func (h *harness) streamLeader(ctx context.Context) (string, error) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	si, err := h.b.Stream().Info(cctx)
	if err != nil {
		return "", err
	}
	if si.Cluster == nil || si.Cluster.Leader == "" {
		return "", errors.New("no leader")
	}
	return si.Cluster.Leader, nil
}

// awaitReplicas waits until the ledger and jobs streams and the status
// bucket have a leader and every replica current.
func (h *harness) awaitReplicas(ctx context.Context) error {
	streams := []string{h.b.Config().Stream, h.q.Config().Stream, "KV_" + h.q.Config().Bucket}
	return poll(ctx, "replicas current", h.cfg.ReadyTimeout, 500*time.Millisecond, func() (bool, error) {
		for _, name := range streams {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			st, err := h.b.JetStream().Stream(cctx, name)
			if err != nil {
				cancel()
				return false, err
			}
			si, err := st.Info(cctx)
			cancel()
			if err != nil {
				return false, err
			}
			if si.Cluster == nil || si.Cluster.Leader == "" || len(si.Cluster.Replicas) != Replicas-1 {
				return false, fmt.Errorf("%s: not every replica placed", name)
			}
			for _, r := range si.Cluster.Replicas {
				if !r.Current || r.Offline {
					return false, fmt.Errorf("%s: replica %s not current", name, r.Name)
				}
			}
		}
		return true, nil
	})
}

func percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	for i := 1; i < len(s); i++ { // insertion sort: a few thousand samples
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
	return s[min(len(s)-1, int(p*float64(len(s))))]
}

func (h *harness) figures(o *Observation, elapsed time.Duration) Figures {
	fg := Figures{Jobs: len(o.Jobs), Elapsed: elapsed, Processes: len(h.f.All())}
	for _, m := range o.Stream {
		if m.Entry != nil {
			fg.Events++
		}
	}
	h.mu.Lock()
	fg.LagP50, fg.LagP99, fg.LagSamples = percentile(h.lag, 0.5), percentile(h.lag, 0.99), len(h.lag)
	h.mu.Unlock()
	_, fg.WitnessFailed = h.wit.result()
	for _, a := range o.Auditors {
		fg.AuditorReconnects += a.Reconnects
	}
	if len(o.Hosts) > 0 {
		fg.hostRecoveryFigures(recoveries(o))
	}
	return fg
}

// Print writes the checks table, the figures and the faults to w.
func (r *Report) Print(w io.Writer) {
	fmt.Fprintf(w, "\nsoak checks (seed %d)\n", r.Seed)
	width := 0
	for _, c := range r.Results {
		width = max(width, len(c.Check))
	}
	rows := r.Results
	if r.Interrupted != "" { // the checks did not run: say so for each
		rows = nil
		checks := Checks
		if r.Hosts > 0 {
			checks = append(slices.Clone(Checks), HostChecks...)
		}
		for _, c := range checks {
			rows = append(rows, Result{Check: c.Name, Detail: "not run: interrupted"})
		}
	}
	for _, c := range rows {
		width = max(width, len(c.Check))
	}
	fmt.Fprintf(w, "  %-*s  %-6s %s\n", width, "CHECK", "RESULT", "DETAIL")
	for _, c := range rows {
		res := "pass"
		switch {
		case r.Interrupted != "":
			res = "-"
		case !c.Pass:
			res = "FAIL"
		}
		fmt.Fprintf(w, "  %-*s  %-6s %s\n", width, c.Check, res, c.Detail)
	}
	fg := r.Figures
	secs := fg.Elapsed.Seconds()
	if r.Interrupted != "" {
		fmt.Fprintf(w, "\nfigures so far: %d jobs submitted, %d finished in %s; projector lag p50 %.0f p99 %.0f events (%d samples); %d witness appends not acknowledged; %d auditor reconnects\n",
			fg.Submitted, fg.Jobs, fg.Elapsed.Round(time.Second), fg.LagP50, fg.LagP99, fg.LagSamples, fg.WitnessFailed, fg.AuditorReconnects)
	} else {
		fmt.Fprintf(w, "\nfigures: %d jobs and %d ledger events in %s: %.2f jobs/s, %.1f events/s; projector lag p50 %.0f p99 %.0f events (%d samples); %d witness appends not acknowledged; %d auditor reconnects\n",
			fg.Jobs, fg.Events, fg.Elapsed.Round(time.Second), float64(fg.Jobs)/secs, float64(fg.Events)/secs,
			fg.LagP50, fg.LagP99, fg.LagSamples, fg.WitnessFailed, fg.AuditorReconnects)
	}
	switch {
	case fg.HostRecoveriesSeen > 0:
		fmt.Fprintf(w, "host loss to its jobs running again elsewhere: p50 %s p99 %s (%d jobs; %d never seen running again)\n",
			fg.HostRecoveryP50.Round(time.Millisecond), fg.HostRecoveryP99.Round(time.Millisecond), fg.HostRecoveriesSeen, fg.HostRecoveriesUnseen)
	case fg.HostRecoveriesUnseen > 0:
		fmt.Fprintf(w, "host loss to its jobs running again elsewhere: none seen (%d jobs never seen running again)\n", fg.HostRecoveriesUnseen)
	}
	fmt.Fprintf(w, "\nfaults (%d):\n  %-8s %-32s %-12s %-10s %s\n", len(r.Faults), "AT", "FAULT", "TARGET", "HEALED", "RECOVERED")
	for _, fr := range r.Faults {
		extra := ""
		if fr.Err != "" {
			extra = "  error: " + fr.Err
		}
		fmt.Fprintf(w, "  %-8s %-32s %-12s %-10s %s%s\n", fr.At.Round(time.Second), fr.Kind, fr.Target,
			fr.Healed.Round(time.Millisecond), fmtRecovery(fr.Recovered), extra)
	}
	if r.Interrupted != "" {
		fmt.Fprintf(w, "\nINTERRUPTED: %s; the checks did not run; the fault schedule's seed is %d (repeat with -seed %d); logs in %s\n",
			r.Interrupted, r.Seed, r.Seed, filepath.Join(r.Dir, "logs"))
		return
	}
	failed := 0
	for _, c := range r.Results {
		if !c.Pass {
			if failed == 0 {
				fmt.Fprintln(w) // repeated last, where a log's tail shows them
			}
			failed++
			fmt.Fprintf(w, "failed: %s: %s\n", c.Check, clip(c.Detail, 2000))
		}
	}
	if failed > 0 {
		fmt.Fprintf(w, "\nFAIL: %d of %d checks failed; the fault schedule's seed is %d (repeat with -seed %d); logs in %s; every problem of the stream's checks: go run ./cmd/soak recheck %s\n",
			failed, len(r.Results), r.Seed, r.Seed, filepath.Join(r.Dir, "logs"), r.Dir)
		return
	}
	fmt.Fprintf(w, "\nPASS: %d checks\n", len(r.Results))
}

// clip cuts s to at most n bytes, saying how much it left out.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return fmt.Sprintf("%s... (%d more bytes)", s[:n], len(s)-n)
}
