package proctree_test

import (
	"fmt"
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/sandboxd/internal/proctree"
	"github.com/alineo-labs/alineo/testenv"
)

func TestDescendantsFindsGrandchild(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc on this system")
	}
	// sh starts sleep as its child, so sleep is a grandchild of this test.
	cmd := exec.Command("sh", "-c", "sleep 30 & wait")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sh := cmd.Process.Pid
	t.Cleanup(func() {
		for _, pid := range proctree.Descendants(sh) {
			if p, err := os.FindProcess(pid); err == nil {
				_ = p.Kill()
			}
		}
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	var kids []int
	testenv.Eventually(t, 5*time.Second, func() error {
		if kids = proctree.Descendants(sh); len(kids) == 0 {
			return fmt.Errorf("Descendants(%d) = [], want the sleep child", sh)
		}
		return nil
	})
	all := proctree.Descendants(os.Getpid())
	for _, want := range append([]int{sh}, kids...) {
		if !slices.Contains(all, want) {
			t.Errorf("Descendants(self) = %v, missing %d", all, want)
		}
	}
}
