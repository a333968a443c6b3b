package soak

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/alineo-labs/alineo/bus"
	"github.com/alineo-labs/alineo/opensandbox"
)

type projMetrics struct {
	lag    float64
	offset uint64
}

// projectorMetrics reads every projector partition's lag and offset and
// returns their sum and lowest, and each partition's; an error when one
// cannot be read.
func (f *Fleet) projectorMetrics() (projMetrics, []PartitionProgress, error) {
	var all projMetrics
	parts := make([]PartitionProgress, 0, len(f.Metrics))
	for i, addr := range f.Metrics {
		m, err := partitionMetrics(addr)
		if err != nil {
			return all, nil, fmt.Errorf("%s: %w", f.Projectors[i].Name, err)
		}
		parts = append(parts, PartitionProgress{Partition: i, Lag: m.lag, Offset: m.offset})
		all.lag += m.lag
		if i == 0 || m.offset < all.offset {
			all.offset = m.offset
		}
	}
	return all, parts, nil
}

// partitionMetrics reads one projector's lag and offset from its /metrics.
func partitionMetrics(addr string) (projMetrics, error) {
	var m projMetrics
	client := http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get("http://" + addr + "/metrics")
	if err != nil {
		return m, err
	}
	defer resp.Body.Close()
	found := 0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		name, rest, _ := strings.Cut(line, " ")
		name, _, _ = strings.Cut(name, "{")
		if strings.Contains(line, "} ") {
			_, rest, _ = strings.Cut(line, "} ")
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
		if err != nil {
			continue
		}
		switch name {
		case "alineo_projector_lag_events":
			m.lag, found = v, found+1
		case "alineo_projector_offset":
			m.offset, found = uint64(v), found+1
		}
	}
	if found < 2 {
		return m, errors.New("projector metrics: no lag_events and offset")
	}
	return m, nil
}

// observe waits for the fleet to settle (nothing running, the projector and
// the auditors caught up), each wait bounded by SettleTimeout, then collects
// what the checks look at. A wait that runs out is not an error here: the
// check it serves then fails with what was seen.
func (h *harness) observe(ctx context.Context) *Observation {
	o := &Observation{}
	st := h.cfg.SettleTimeout
	if ctx.Err() != nil {
		st = 0 // interrupted: look once, wait for nothing
	}
	h.load.mu.Lock()
	for _, j := range h.load.jobs {
		o.Jobs = append(o.Jobs, *j)
	}
	h.load.mu.Unlock()
	if err := poll(ctx, "nothing running", st, time.Second, func() (bool, error) {
		o.SandboxdLive, o.HostSandboxes, o.HostErrs = h.liveSandboxes(ctx)
		o.ReadModelRunning = h.runningSessions(ctx)
		return len(o.SandboxdLive) == 0 && len(o.ReadModelRunning) == 0, nil
	}); err != nil {
		h.logf("%v", err)
	}
	if h.f.Hosts != nil {
		h.observeHosts(ctx, o)
	}
	// caughtUp waits for the projector to have projected the ledger up to
	// the sequence target gives (asked again on each look).
	caughtUp := func(what string, target func() (uint64, error)) {
		if err := poll(ctx, what, st, time.Second, func() (bool, error) {
			seq, err := target()
			if err != nil {
				return false, err
			}
			m, parts, err := h.f.projectorMetrics()
			if err != nil {
				return false, err
			}
			o.Lag, o.Offset, o.Partitions, o.LagErr = m.lag, m.offset, parts, ""
			return m.lag == 0 && m.offset >= seq, fmt.Errorf("lag %v, offset %d, stream %d", m.lag, m.offset, seq)
		}); err != nil {
			o.LagErr = err.Error()
		}
	}
	var last uint64
	caughtUp("projector caught up", func() (uint64, error) {
		seq, err := h.lastLedgerSeq(ctx)
		last = seq
		return seq, err
	})
	h.logf("reading the stream back (last ledger entry %d)", last)
	if err := poll(ctx, "read the stream", st, time.Second, func() (bool, error) {
		ms, err := h.readStream(ctx)
		o.Stream = ms
		return err == nil, err
	}); err != nil {
		h.logf("%v", err)
	}
	// Entries appended after that look (an executor back from a fault ends
	// the sandboxes of its jobs that moved on) are in the stream read and
	// must be projected too: the lag check compares the two.
	if read := lastEntrySeq(o.Stream); read > last {
		h.logf("the stream grew to %d while it was read: waiting for the projector again", read)
		caughtUp("projector caught up with the stream read", func() (uint64, error) { return read, nil })
	}
	_ = poll(ctx, "auditors caught up", st, 500*time.Millisecond, func() (bool, error) {
		for _, a := range h.auditors {
			if compareSeen(a.log().Seen, o.expectedFor(a.filter)) != "" {
				return false, nil
			}
		}
		return true, nil
	})
	for _, a := range h.auditors {
		o.Auditors = append(o.Auditors, a.log())
	}
	o.Witness, _ = h.wit.result()
	o.Verify = h.verify(ctx)
	o.Crashes = h.f.Crashes()
	return o
}

// lastLedgerSeq is the stream sequence of the newest ledger entry (fences,
// which the projector does not consume, excluded).
func (h *harness) lastLedgerSeq(ctx context.Context) (uint64, error) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	m, err := h.b.LastMsg(cctx, h.b.LedgerFilter())
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return m.Sequence, nil
}

// readStream reads the whole ledger stream, fences included, in order.
func (h *harness) readStream(ctx context.Context) ([]StreamMsg, error) {
	cctx, cancel := context.WithTimeout(ctx, h.cfg.SettleTimeout)
	defer cancel()
	last, err := h.b.LastSeq(cctx)
	if err != nil {
		return nil, err
	}
	cons, err := h.b.JetStream().OrderedConsumer(cctx, h.b.Config().Stream, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy})
	if err != nil {
		return nil, err
	}
	fencePrefix := h.b.Config().FencePrefix + "."
	var out []StreamMsg
	for len(out) == 0 || out[len(out)-1].Seq < last {
		batch, err := cons.Fetch(1000, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return out, err
		}
		for m := range batch.Messages() {
			md, err := m.Metadata()
			if err != nil {
				return out, err
			}
			sm := StreamMsg{Seq: md.Sequence.Stream, Subject: m.Subject(), MsgID: m.Headers().Get(jetstream.MsgIDHeader)}
			if id, ok := strings.CutPrefix(sm.Subject, fencePrefix); ok {
				sm.Fence = id
			} else if e, err := bus.DecodeMsg(m.Data(), sm.Seq); err != nil {
				sm.DecodeErr = err.Error()
			} else {
				sm.Entry = &e
			}
			out = append(out, sm)
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
			return out, err
		}
		if cctx.Err() != nil {
			return out, cctx.Err()
		}
	}
	return out, nil
}

// liveSandboxes lists the sandboxes every sandboxd has in a state other
// than Terminated or Failed, each named by its sandboxd in a multi-host run
// (a sandboxd that cannot be asked is named with the error: the check then
// fails). byHost and errs are the same by host (multi-host runs only).
func (h *harness) liveSandboxes(ctx context.Context) (all []string, byHost map[string][]string, errs map[string]string) {
	if h.f.Hosts == nil {
		live, err := listLive(ctx, h.f.SandboxURL)
		if err != nil {
			return []string{err.Error()}, nil, nil
		}
		return live, nil, nil
	}
	byHost, errs = map[string][]string{}, map[string]string{}
	for _, host := range h.f.Hosts {
		live, err := listLive(ctx, host.SandboxURL)
		if err != nil {
			errs[host.Name] = err.Error()
			all = append(all, host.Name+": "+err.Error())
			continue
		}
		byHost[host.Name] = live
		for _, s := range live {
			all = append(all, host.Name+": "+s)
		}
	}
	return all, byHost, errs
}

// listLive lists the sandboxes the sandboxd at url has in a state other
// than Terminated or Failed.
func listLive(ctx context.Context, url string) ([]string, error) {
	c, err := opensandbox.New(opensandbox.Config{BaseURL: url})
	if err != nil {
		return nil, err
	}
	var out []string
	for page := 1; ; page++ {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		p, err := c.ListSandboxes(cctx, opensandbox.ListSandboxesOptions{Page: page, PageSize: 200})
		cancel()
		if err != nil {
			return nil, fmt.Errorf("sandboxd list: %w", err)
		}
		for _, s := range p.Items {
			if s.Status.State != opensandbox.StateTerminated && s.Status.State != opensandbox.StateFailed {
				out = append(out, s.ID+" "+string(s.Status.State))
			}
		}
		if page >= p.Pagination.TotalPages || len(p.Items) == 0 {
			return out, nil
		}
	}
}

// runningSessions asks the API for the sessions the read model calls running.
func (h *harness) runningSessions(ctx context.Context) []string {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(cctx, http.MethodGet, h.f.APIURL+"/v1/sandboxes?status=running&limit=1000", nil)
	if h.f.APIToken != "" {
		req.Header.Set("Authorization", "Bearer "+h.f.APIToken)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return []string{"api: " + err.Error()}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return []string{"api: " + resp.Status}
	}
	var page struct {
		Sandboxes []struct {
			Name      string `json:"name"`
			SandboxID string `json:"sandboxId"`
		} `json:"sandboxes"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&page); err != nil {
		return []string{"api: " + err.Error()}
	}
	var out []string
	for _, s := range page.Sandboxes {
		out = append(out, s.Name+"/"+s.SandboxID)
	}
	return out
}

// verify runs `projector verify` against the fleet's Postgres: "" when it
// passed, else its error and last lines.
func (h *harness) verify(ctx context.Context) string {
	cctx, cancel := context.WithTimeout(ctx, h.cfg.SettleTimeout)
	defer cancel()
	return runVerify(cctx, filepath.Join(h.f.bin, "projector"), []string{replicasEnv}, h.f.NATSURL(), "--postgres", h.f.DSN,
		"--partitions", strconv.Itoa(len(h.f.Projectors)))
}

// runVerify runs projector's verify (a rebuild of the stream compared with
// the store row for row) with the store flags given.
func runVerify(ctx context.Context, projector string, env []string, natsURL string, store ...string) string {
	args := append([]string{"verify", "--nats", natsURL, "--metrics", ""}, store...)
	cmd := exec.CommandContext(ctx, projector, args...)
	cmd.Env = append(cmd.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err == nil {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return fmt.Sprintf("projector verify: %v: %s", err, strings.Join(lines[max(0, len(lines)-3):], " | "))
}
