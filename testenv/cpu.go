package testenv

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"
)

// ErrNoMachineCPU is MachineCPU's error where /proc/stat is not there.
var ErrNoMachineCPU = errors.New("no /proc/stat: machine CPU time unknown")

// clockTick is the unit of /proc/stat's counters (USER_HZ), 100 per second
// on every Linux ABI Go runs on.
const clockTick = 10 * time.Millisecond

// MachineCPU returns the time this machine's cores have spent busy since
// boot, summed over cores: every state of /proc/stat's cpu line but idle and
// iowait (user, nice, system, irq, softirq, steal). Unlike a process's own
// CPU time it counts what a benchmark causes elsewhere: other processes
// (execd, Postgres), kernel threads (the journal's commits, the block
// device's interrupts). Its resolution is 10 ms per core.
func MachineCPU() (time.Duration, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrNoMachineCPU, err)
	}
	line, _, _ := bytes.Cut(b, []byte("\n"))
	fields := bytes.Fields(line)
	if len(fields) < 5 || string(fields[0]) != "cpu" {
		return 0, fmt.Errorf("%w: first line %q", ErrNoMachineCPU, line)
	}
	var busy uint64
	for i, f := range fields[1:] {
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		if i >= 8 { // guest and guest_nice are counted in user and nice already
			break
		}
		v, err := strconv.ParseUint(string(f), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%w: field %d of %q: %w", ErrNoMachineCPU, i+1, line, err)
		}
		busy += v
	}
	return time.Duration(busy) * clockTick, nil
}
