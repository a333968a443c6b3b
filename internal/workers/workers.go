package workers

import (
	"context"
	"runtime/pprof"
	"time"
)

// std is the pool Go runs functions on.
var std = newPool(time.Second)

// pool is a set of workers: goroutines waiting for a function, each for up
// to idleTimeout before it exits.
type pool struct {
	// idle hands a task to a worker waiting for one: unbuffered, a send
	// succeeds only while a worker waits.
	idle        chan task
	idleTimeout time.Duration
}

func newPool(idleTimeout time.Duration) *pool {
	return &pool{idle: make(chan task), idleTimeout: idleTimeout}
}

// task is a function and the context whose profiler labels it runs with.
type task struct {
	ctx context.Context
	f   func()
}

// Go runs f on a worker waiting for a function, or on a new goroutine when
// none waits, and returns at once, as the go statement does. f runs with
// the profiler labels of ctx (runtime/pprof.SetGoroutineLabels), which are
// the caller's goroutine's when it set them with pprof.Do; ctx is not
// otherwise used. Once f returns, the goroutine waits for another function
// for a while, then exits.
func Go(ctx context.Context, f func()) { std.Go(ctx, f) }

// Go is the package's Go on p.
func (p *pool) Go(ctx context.Context, f func()) {
	t := task{ctx, f}
	select {
	case p.idle <- t:
	default:
		go p.work(t)
	}
}

// work runs t, then each task handed to it, until it has waited
// p.idleTimeout for one in vain.
func (p *pool) work(t task) {
	t.run()
	timer := time.NewTimer(p.idleTimeout)
	defer timer.Stop()
	for {
		select {
		case t := <-p.idle:
			t.run()
			timer.Reset(p.idleTimeout)
		case <-timer.C:
			return
		}
	}
}

func (t task) run() {
	pprof.SetGoroutineLabels(t.ctx)
	t.f()
	// A waiting worker works for no one: it carries no labels.
	pprof.SetGoroutineLabels(context.Background())
}
