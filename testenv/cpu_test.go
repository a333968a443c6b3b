package testenv_test

import (
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/testenv"
)

// TestMachineCPUCountsABusyCore spins one core for 300 ms: the machine's busy
// time grows by about that much (other processes only add to it).
func TestMachineCPUCountsABusyCore(t *testing.T) {
	before, err := testenv.MachineCPU()
	if errors.Is(err, testenv.ErrNoMachineCPU) && runtime.GOOS != "linux" {
		t.Skipf("MachineCPU on %s: %v", runtime.GOOS, err)
	}
	if err != nil {
		t.Fatal(err)
	}
	const spin = 300 * time.Millisecond
	x := 0
	for start := time.Now(); time.Since(start) < spin; {
		x++
	}
	after, err := testenv.MachineCPU()
	if err != nil {
		t.Fatal(err)
	}
	// The spin may be preempted on a loaded machine, but /proc/stat's
	// counters tick every 10 ms per core: allow a third for both.
	if got := after - before; got < spin*2/3 {
		t.Errorf("machine busy time grew by %v over a %v spin (%d turns); want at least %v", got, spin, x, spin*2/3)
	}
}
