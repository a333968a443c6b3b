package runtime

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// setCPULimit writes the CFS bandwidth (quota and period, microseconds) of
// the container whose cgroupsPath is /parent/id: the v1 cpu hierarchy's
// group if there is one (hybrid systems account there), else the unified
// hierarchy's cpu.max. The v1 period is the spec's, set by the runtime.
func setCPULimit(parent, id string, quota, period int64) error {
	v1 := filepath.Join(cgroupRoot, "cpu", parent, id, "cpu.cfs_quota_us")
	if _, err := os.Stat(v1); err == nil {
		return writeCgroupFile(v1, strconv.FormatInt(quota, 10))
	}
	v2 := filepath.Join(cgroupRoot, parent, id, "cpu.max")
	if _, err := os.Stat(v2); err == nil {
		return writeCgroupFile(v2, strconv.FormatInt(quota, 10)+" "+strconv.FormatInt(period, 10))
	}
	return fmt.Errorf("container %s has no CPU controller: neither %s nor %s exists", id, v1, v2)
}

// writeCgroupFile writes one value to a cgroup file, which takes it in one
// write or refuses it.
func writeCgroupFile(path, value string) error {
	if err := os.WriteFile(path, []byte(value), 0); err != nil {
		return fmt.Errorf("cgroup: %w", err)
	}
	return nil
}
