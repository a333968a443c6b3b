package soak

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/internal/mountinfo"
)

// gone reports whether pid is not running (no such process, or a zombie
// its parent has yet to reap).
func gone(pid int) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	f := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+1:]))
	return len(f) > 0 && (f[0] == "Z" || f[0] == "X")
}

func shProc(t *testing.T, dir, name, script string) *Proc {
	t.Helper()
	p := &Proc{Name: name, Path: "/bin/sh", Args: []string{"-c", script}, Dir: dir, Log: filepath.Join(dir, name+".log")}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	return p
}

// abort (the soak got SIGINT or SIGTERM) stops every process at once in
// any state (a stopped executor, a sandboxd that ignores SIGTERM and has a
// child of its own), reaps each, starts none again, and unmounts what is
// left below the soak's directory.
func TestAbortKillsReapsAndUnmounts(t *testing.T) {
	defer func(g time.Duration) { abortGrace = g }(abortGrace)
	abortGrace = time.Second
	dir := t.TempDir()
	f := &Fleet{cfg: Config{Dir: dir, Out: io.Discard}}
	forever := "exec sleep 1000"
	for i := range 2 {
		f.Executors = append(f.Executors, shProc(t, dir, "executor-"+strconv.Itoa(i), forever))
	}
	if err := f.Executors[1].Signal(syscall.SIGSTOP, false); err != nil { // frozen by the fault schedule
		t.Fatal(err)
	}
	for i := range 3 {
		f.NATS = append(f.NATS, shProc(t, dir, "nats-"+strconv.Itoa(i), forever))
	}
	f.API = shProc(t, dir, "api", forever)
	f.Projectors = []*Proc{shProc(t, dir, "projector-0", forever), shProc(t, dir, "projector-1", forever)}
	f.Postgres = shProc(t, dir, "postgres", `trap 'exit 0' INT; while :; do sleep 0.05; done`)
	childFile := filepath.Join(dir, "child")
	f.Sandboxd = shProc(t, dir, "sandboxd", `trap '' TERM; sleep 1000 & echo $! > `+childFile+`; wait`)
	var child int
	deadline := time.Now().Add(10 * time.Second)
	for child == 0 && time.Now().Before(deadline) {
		data, _ := os.ReadFile(childFile)
		child, _ = strconv.Atoi(strings.TrimSpace(string(data)))
		time.Sleep(10 * time.Millisecond) // waits for the shell to start its child
	}
	if child == 0 {
		t.Fatal("sandboxd's child never started")
	}
	mnt := filepath.Join(dir, "sandboxd", "root")
	mounted := false
	if err := os.MkdirAll(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", mnt, "tmpfs", 0, "size=1m"); err == nil {
		mounted = true
		t.Cleanup(func() { _ = syscall.Unmount(mnt, syscall.MNT_DETACH) })
	} else {
		t.Logf("cannot mount a tmpfs here (%v): the unmount is not checked", err)
	}
	var pids []int
	for _, p := range f.All() {
		pids = append(pids, p.Pid())
	}

	t0 := time.Now()
	f.abort()
	took := time.Since(t0)
	if took > abortGrace+10*time.Second {
		t.Errorf("abort took %s", took)
	}
	for i, p := range f.All() {
		if p.Running() || !gone(pids[i]) {
			t.Errorf("%s (pid %d) still running after abort", p.Name, pids[i])
		}
		if len(p.Crashes()) > 0 {
			t.Errorf("%s: abort's kill recorded as a crash: %v", p.Name, p.Crashes())
		}
	}
	if !gone(child) {
		t.Errorf("sandboxd's child %d still running after abort", child)
	}
	if err := f.API.Start(); !errors.Is(err, errStopping) {
		t.Errorf("Start after abort = %v, want errStopping (nothing starts again)", err)
	}
	if mounted {
		if ms, err := mountinfo.Below(dir); err != nil || len(ms) != 0 {
			t.Errorf("mounts left below the soak's directory: %v %v", ms, err)
		}
	}
}

// Every wait of the soak ends when its context does (a signal), whatever
// its own timeout.
func TestPollStopsOnCancel(t *testing.T) {
	ctx, cancel := context.WithCancelCause(context.Background())
	time.AfterFunc(100*time.Millisecond, func() { cancel(errors.New("signal interrupt")) })
	t0 := time.Now()
	err := poll(ctx, "never", time.Hour, time.Second, func() (bool, error) { return false, nil })
	if err == nil || !strings.Contains(err.Error(), "signal interrupt") {
		t.Fatalf("poll = %v, want the cancel's cause", err)
	}
	if d := time.Since(t0); d > 5*time.Second {
		t.Fatalf("poll returned %s after the cancel", d)
	}
}

// An interrupted report says so and lists every check as not run.
func TestInterruptedReportPrints(t *testing.T) {
	rep := &Report{Seed: 42, Interrupted: "signal interrupt while settling", Dir: "/tmp/x",
		Figures: Figures{Submitted: 10, Jobs: 7, Elapsed: time.Minute}}
	if rep.Passed() {
		t.Fatal("an interrupted report passed")
	}
	var b strings.Builder
	rep.Print(&b)
	out := b.String()
	for _, want := range []string{"INTERRUPTED: signal interrupt while settling", "-seed 42", "10 jobs submitted, 7 finished", Checks[0].Name} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, HostChecks[0].Name) {
		t.Errorf("a single-host report lists the host checks:\n%s", out)
	}
	// A multi-host run's report lists its host checks as not run too.
	rep.Hosts = 3
	b.Reset()
	rep.Print(&b)
	for _, c := range HostChecks {
		if !strings.Contains(b.String(), c.Name) {
			t.Errorf("report lacks %q:\n%s", c.Name, b.String())
		}
	}
}

// groupAlive sees a group's live member, and neither a zombie nor a reaped
// process: KillGroup waits on it for a killed group's members to die.
func TestGroupAlive(t *testing.T) {
	cmd := exec.Command("sleep", "100")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pgid := cmd.Process.Pid
	if !groupAlive(pgid) {
		t.Fatal("groupAlive = false for a running group")
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	// Not reaped yet: a zombie, which counts as dead.
	deadline := time.Now().Add(10 * time.Second)
	for groupAlive(pgid) {
		if time.Now().After(deadline) {
			t.Fatal("groupAlive = true 10 s after SIGKILL, before the reap")
		}
		time.Sleep(time.Millisecond)
	}
	if !gone(pgid) {
		t.Fatal("the killed leader is neither a zombie nor gone")
	}
	_ = cmd.Wait()
	if groupAlive(pgid) {
		t.Fatal("groupAlive = true after the reap")
	}
}
