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
	file, value := v1, strconv.FormatInt(quota, 10)
	if _, err := os.Stat(v1); err != nil {
		file, value = filepath.Join(cgroupRoot, parent, id, "cpu.max"), value+" "+strconv.FormatInt(period, 10)
		if _, err := os.Stat(file); err != nil {
			return fmt.Errorf("container %s has no CPU controller: neither %s nor %s exists", id, v1, file)
		}
	}
	if err := os.WriteFile(file, []byte(value), 0); err != nil {
		return fmt.Errorf("cgroup: %w", err)
	}
	return nil
}
