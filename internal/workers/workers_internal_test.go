package workers

import (
	"bytes"
	"context"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/internal/testutil"
)

// goroutineStacks returns the goroutine profile with every stack in full,
// each with its state ("goroutine 7 [select]:").
func goroutineStacks(t *testing.T) []string {
	t.Helper()
	var b bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&b, 2); err != nil {
		t.Fatal(err)
	}
	return strings.Split(b.String(), "\n\n")
}

// waitWorkers waits until exactly n workers (of any pool) wait for a
// function.
func waitWorkers(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		waiting := 0
		for _, g := range goroutineStacks(t) {
			if strings.Contains(g, "workers.(*pool).work(") && strings.Contains(g, "[select") {
				waiting++
			}
		}
		if waiting == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d workers wait for a function, want %d", waiting, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// stopWorkers waits until n workers wait for a function, and has each of
// them exit, so that the next test counts only its own.
func stopWorkers(t *testing.T, p *pool, n int) {
	t.Helper()
	waitWorkers(t, n)
	for range n {
		p.Go(context.Background(), runtime.Goexit)
	}
	waitWorkers(t, 0)
}

func TestGoReusesAWaitingWorker(t *testing.T) {
	ctx := context.Background()
	p := newPool(time.Minute)
	done := make(chan struct{})
	p.Go(ctx, func() { done <- struct{}{} })
	<-done
	for range 20 {
		waitWorkers(t, 1)
		before := testutil.GoroutinesCreated()
		p.Go(ctx, func() { done <- struct{}{} })
		<-done
		if n := testutil.GoroutinesCreated() - before; n != 0 {
			t.Fatalf("Go started %d goroutines while a worker waited", n)
		}
	}
	stopWorkers(t, p, 1)
}

func TestGoRunsEachAtOnce(t *testing.T) {
	const n = 64
	var started sync.WaitGroup
	started.Add(n)
	all := make(chan struct{})
	release := make(chan struct{})
	go func() { started.Wait(); close(all) }()
	p := newPool(time.Minute)
	for range n {
		p.Go(context.Background(), func() {
			started.Done()
			<-release // each waits for the others: Go must not queue one behind another
		})
	}
	select {
	case <-all:
	case <-time.After(10 * time.Second):
		t.Fatal("not every function runs at once")
	}
	close(release)
	stopWorkers(t, p, n)
}

func TestGoRunsWithTheLabelsOfItsContext(t *testing.T) {
	labelled := func(k, v string) (context.Context, string) {
		return pprof.WithLabels(context.Background(), pprof.Labels(k, v)), `labels: {"` + k + `":"` + v + `"}`
	}
	// The goroutine profile (debug=1) prints a stack's labels above it.
	labelsOf := func(marker string) string {
		t.Helper()
		var b bytes.Buffer
		if err := pprof.Lookup("goroutine").WriteTo(&b, 1); err != nil {
			t.Fatal(err)
		}
		for _, g := range strings.Split(b.String(), "\n\n") {
			if strings.Contains(g, marker) {
				if _, l, ok := strings.Cut(g, "# labels: "); ok {
					l, _, _ = strings.Cut(l, "\n")
					return "labels: " + l
				}
				return ""
			}
		}
		t.Fatalf("no goroutine runs %s", marker)
		return ""
	}
	p := newPool(time.Minute)
	for i, kv := range [][2]string{{"phase", "one"}, {"phase", "two"}} {
		if i > 0 {
			waitWorkers(t, 1) // the second runs on the first's worker
		}
		ctx, want := labelled(kv[0], kv[1])
		running, release := make(chan struct{}), make(chan struct{})
		p.Go(ctx, func() { close(running); waitIn(release) })
		<-running
		if got := labelsOf("workers.waitIn+"); got != want {
			t.Errorf("run %d: %q, want %q", i, got, want)
		}
		close(release)
	}
	waitWorkers(t, 1)
	if got := labelsOf("workers.(*pool).work+"); got != "" {
		t.Errorf("a waiting worker has %q", got)
	}
	stopWorkers(t, p, 1)
}

// waitIn waits until c is closed: a frame the goroutine profile names.
//
//go:noinline
func waitIn(c chan struct{}) { <-c }

func TestWorkersExitWhenIdle(t *testing.T) {
	p := newPool(20 * time.Millisecond)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		p.Go(context.Background(), wg.Done)
	}
	wg.Wait()
	waitWorkers(t, 0)
}
