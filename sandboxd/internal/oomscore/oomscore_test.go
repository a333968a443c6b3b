//go:build linux

package oomscore

import (
	"bytes"
	"os/exec"
	"strings"
	"sync"
	"testing"
)

// forkAtOnce forks as its first act; the child reports the score it
// inherited. With the score written after Start, under load, some children
// report their parent's score (0) instead.
const forkAtOnce = `(cat /proc/self/oom_score_adj)`

func TestChildrenForkedAtOnceInheritTheScore(t *testing.T) {
	const n, adj = 400, 777
	var wg sync.WaitGroup
	errs := make(chan string, n)
	sem := make(chan struct{}, 16)
	for range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			var out bytes.Buffer
			cmd := exec.Command("/bin/sh", "-c", forkAtOnce)
			cmd.Stdout = &out
			if err := Start(cmd, adj); err != nil {
				errs <- "start: " + err.Error()
				return
			}
			if err := cmd.Wait(); err != nil {
				errs <- "wait: " + err.Error()
				return
			}
			if got := strings.TrimSpace(out.String()); got != "777" {
				errs <- "score " + got
			}
		}()
	}
	wg.Wait()
	close(errs)
	bad := map[string]int{}
	for e := range errs {
		bad[e]++
	}
	if len(bad) > 0 {
		t.Errorf("of %d commands at oom_score_adj %d, children reported: %v", n, adj, bad)
	}
}

func TestExitCodesAndKillsSurviveTheStart(t *testing.T) {
	cmd := exec.Command("/bin/sh", "-c", "exit 7")
	if err := Start(cmd, 500); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); cmd.ProcessState.ExitCode() != 7 {
		t.Errorf("exit 7: %v, code %d", err, cmd.ProcessState.ExitCode())
	}
	cmd = exec.Command("/bin/sleep", "30")
	if err := Start(cmd, 500); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Process.Kill()
	if err := cmd.Wait(); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Errorf("killed sleep: %v", err)
	}
	if err := Start(exec.Command("/nonexistent/binary"), 500); err == nil {
		t.Error("a missing binary started")
	}
}
