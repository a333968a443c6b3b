package soak

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/alineo-labs/alineo/bus"
	"github.com/alineo-labs/alineo/internal/testutil"
	"github.com/alineo-labs/alineo/jobs"
)

// RecheckCommand is the argument that makes the soak binary recheck a kept
// run's directory (Recheck) instead of running a soak.
const RecheckCommand = "recheck"

// Rechecks are the checks Recheck can run again: those that read only the
// ledger stream and the jobs' statuses, which a run's NATS stores keep.
var Rechecks = []Check{Checks[0], Checks[1], Checks[4]}

// Recheck runs Rechecks again on what a soak left in dir (its -dir, kept
// after a failure): it starts the run's NATS nodes in this process on their
// stores (dir/nats-1, ...), on fresh ports, reads the stream and every job's
// status back, and stops the nodes. The jobs are those the statuses name
// (soak-<run>-<n>). The other checks need what only the run saw (the witness,
// the auditors, sandboxd, the projectors) and are not rerun.
func Recheck(ctx context.Context, dir string, timeout time.Duration) ([]Result, error) {
	stores, err := filepath.Glob(filepath.Join(dir, "nats-*"))
	if err != nil || len(stores) == 0 {
		return nil, fmt.Errorf("recheck %s: no NATS stores (nats-*) in it", dir)
	}
	slices.Sort(stores)
	url, stop, err := startStores(ctx, stores, timeout)
	if err != nil {
		return nil, fmt.Errorf("recheck %s: %w", dir, err)
	}
	defer stop()
	b, err := bus.Open(ctx, bus.Config{URL: url, Replicas: min(Replicas, len(stores)), SetupTimeout: timeout})
	if err != nil {
		return nil, fmt.Errorf("recheck %s: %w", dir, err)
	}
	defer b.Close()
	o, err := observeStores(ctx, b, timeout)
	if err != nil {
		return nil, fmt.Errorf("recheck %s: %w", dir, err)
	}
	return runChecks(o, Rechecks), nil
}

// startStores starts a cluster node on each store, named after its
// directory, and returns the client URLs and a function that stops them.
func startStores(ctx context.Context, stores []string, timeout time.Duration) (string, func(), error) {
	ports, err := testutil.FreePorts(2 * len(stores))
	if err != nil {
		return "", nil, err
	}
	var routes, urls []string
	for i := range stores {
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", ports[len(stores)+i]))
		urls = append(urls, fmt.Sprintf("nats://127.0.0.1:%d", ports[i]))
	}
	var servers []*server.Server
	stop := func() {
		for _, s := range servers {
			s.Shutdown()
			s.WaitForShutdown()
		}
	}
	for i, store := range stores {
		if st, err := os.Stat(store); err != nil || !st.IsDir() {
			stop()
			return "", nil, fmt.Errorf("store %s is not a directory", store)
		}
		s, err := server.NewServer(nodeOptions(filepath.Base(store), "127.0.0.1", ports[i], ports[len(stores)+i], strings.Join(routes, ","), store))
		if err != nil {
			stop()
			return "", nil, err
		}
		s.SetLoggerV2(nil, false, false, false)
		go s.Start()
		servers = append(servers, s)
	}
	for _, s := range servers {
		if !s.ReadyForConnections(timeout) {
			stop()
			return "", nil, fmt.Errorf("node %s not ready after %v", s.Name(), timeout)
		}
	}
	// Requests before the cluster has a JetStream meta leader time out.
	if err := poll(ctx, "a JetStream meta leader", timeout, 50*time.Millisecond, func() (bool, error) {
		leader := false
		for _, s := range servers {
			if !s.JetStreamIsCurrent() {
				return false, nil
			}
			leader = leader || s.JetStreamIsLeader()
		}
		return leader, nil
	}); err != nil {
		stop()
		return "", nil, err
	}
	return strings.Join(urls, ","), stop, nil
}

// observeStores reads the jobs' statuses and the ledger stream, retrying
// while the restarted cluster elects its leaders.
func observeStores(ctx context.Context, b *bus.Bus, timeout time.Duration) (*Observation, error) {
	o := &Observation{}
	var sts []jobs.Status
	err := poll(ctx, "read the jobs' statuses", timeout, 500*time.Millisecond, func() (bool, error) {
		// Each try bounded: a listing started before the bucket's stream
		// has a leader can wait for good.
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		q, err := jobs.OpenQueue(actx, b.JetStream(), jobs.QueueConfig{Replicas: Replicas})
		if err != nil {
			return false, err
		}
		sts, err = q.List(actx, 1_000_000)
		return err == nil, err
	})
	if err != nil {
		return nil, err
	}
	for _, st := range sts {
		run, n, ok := jobNumber(st.Name)
		if !ok {
			return nil, fmt.Errorf("job %s: %q is not a soak job's name (soak-<run>-<n>)", st.ID, st.Name)
		}
		_, j := jobSpec(run, n)
		j.ID, j.Status = st.ID, st
		o.Jobs = append(o.Jobs, j)
	}
	h := &harness{b: b, cfg: Config{SettleTimeout: timeout}}
	err = poll(ctx, "read the stream", timeout, 500*time.Millisecond, func() (bool, error) {
		ms, err := h.readStream(ctx)
		o.Stream = ms
		return err == nil, err
	})
	if err != nil {
		return nil, err
	}
	return o, nil
}

// jobNumber parses soak-<run>-<n>, the name jobSpec gives job n of run.
func jobNumber(name string) (run string, n int, ok bool) {
	rest, ok := strings.CutPrefix(name, "soak-")
	if !ok {
		return "", 0, false
	}
	i := strings.LastIndexByte(rest, '-')
	if i <= 0 {
		return "", 0, false
	}
	n, err := strconv.Atoi(rest[i+1:])
	if err != nil || n < 0 {
		return "", 0, false
	}
	return rest[:i], n, true
}
