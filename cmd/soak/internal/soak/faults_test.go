package soak

import (
	"math/rand/v2"
	"slices"
	"testing"
)

func draw(seed uint64, kinds []string, n int) []string {
	s := &schedule{rng: rand.New(rand.NewPCG(seed, 18)), kinds: kinds}
	out := make([]string, n)
	for i := range out {
		out[i] = s.next()
	}
	return out
}

// Each round of a schedule deals every fault kind once; a seed repeats
// the order, another seed draws another one.
func TestScheduleDealsEveryKindOncePerRound(t *testing.T) {
	kinds := faultKinds(Config{Hosts: 3})
	if got, want := len(kinds), len(FaultKinds)+4; got != want {
		t.Fatalf("%d kinds, want %d", got, want)
	}
	for _, k := range HostFaultKinds {
		if !slices.Contains(kinds, k) {
			t.Errorf("multi-host kinds lack %q", k)
		}
	}
	if got := faultKinds(Config{}); !slices.Equal(got, FaultKinds) {
		t.Errorf("single-host kinds = %v, want %v", got, FaultKinds)
	}
	const rounds = 5
	got := draw(7, kinds, rounds*len(kinds))
	for r := range rounds {
		round := slices.Clone(got[r*len(kinds) : (r+1)*len(kinds)])
		slices.Sort(round)
		want := slices.Clone(kinds)
		slices.Sort(want)
		if !slices.Equal(round, want) {
			t.Errorf("round %d = %v, want each of %v once", r, got[r*len(kinds):(r+1)*len(kinds)], kinds)
		}
	}
	if again := draw(7, kinds, len(got)); !slices.Equal(again, got) {
		t.Errorf("seed 7 drew %v, then %v", got, again)
	}
	if other := draw(8, kinds, len(got)); slices.Equal(other, got) {
		t.Errorf("seeds 7 and 8 drew the same schedule %v", got)
	}
	// The schedule does not change the kinds it was given.
	if !slices.Equal(kinds, faultKinds(Config{Hosts: 3})) {
		t.Errorf("kinds changed: %v", kinds)
	}
}

// The multi-host soak's durations: a partition outlasts the jobs' lease.
func TestHostFaultDefaults(t *testing.T) {
	c := Config{Hosts: 3, AckWait: 7e9}
	c.defaults()
	if c.Partition <= c.AckWait {
		t.Errorf("partition %s, ack-wait %s: a partition must outlast the lease", c.Partition, c.AckWait)
	}
	if c.HostDown.Seconds() != 30 || c.S3Down.Seconds() != 10 || c.ExecutorsPerHost != 2 {
		t.Errorf("host down %s, S3 down %s, %d executors per host", c.HostDown, c.S3Down, c.ExecutorsPerHost)
	}
	if c.Subnet != DefaultSubnet || c.NetPrefix != DefaultNetPrefix || c.NetRoot != NetRoot {
		t.Errorf("network %s %s %s", c.Subnet, c.NetPrefix, c.NetRoot)
	}
}
