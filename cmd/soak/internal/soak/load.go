package soak

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/alineo-labs/alineo/jobs"
)

// Job is one submitted job and what its run must show.
type Job struct {
	ID   string
	Name string // the session name of every attempt
	// PreCheckpoint are the exec commands before the checkpoint (each must run
	// live exactly once), Tag the checkpoint's tag.
	PreCheckpoint []string
	Tag           string
	// FinalCmd is the last step; Want its stdout.
	FinalCmd string
	Want     string
	// Status is the job's last status read.
	Status jobs.Status
}

// jobSpec is job n of run: files written before and after a checkpoint,
// streamed output, a result that needs both the restored snapshot and the
// steps after it.
func jobSpec(run string, n int) (jobs.Spec, Job) {
	name := fmt.Sprintf("soak-%s-%d", run, n)
	pre := []string{
		"echo start $SOAK_N; for k in 1 2 3 4 5; do echo line $k; done; sleep 0.2",
		"tr a-z A-Z < /root/job/in.txt > /root/job/mid.txt; echo $((SOAK_N * 7)) >> /root/job/mid.txt",
	}
	final := "cat /root/job/mid.txt /root/job/post.txt"
	spec := jobs.Spec{
		Name:      name,
		Image:     "host",
		Resources: jobs.Resources{CPU: "1", Memory: "256Mi"},
		Env:       map[string]string{"SOAK_N": strconv.Itoa(n)},
		Steps: []jobs.Step{
			{WriteFile: &jobs.WriteFileStep{Path: "/root/job/in.txt", Content: fmt.Sprintf("input-%d\n", n)}},
			{Exec: &jobs.ExecStep{Command: pre[0]}},
			{Exec: &jobs.ExecStep{Command: pre[1]}},
			{Checkpoint: &jobs.CheckpointStep{Tag: "mid"}},
			{Exec: &jobs.ExecStep{Command: "echo working $SOAK_N; sleep 1; echo worked $SOAK_N"}},
			{WriteFile: &jobs.WriteFileStep{Path: "/root/job/post.txt", Content: fmt.Sprintf("post-%d\n", n)}},
			{Exec: &jobs.ExecStep{Command: final}},
		},
	}
	want := fmt.Sprintf("INPUT-%d\n%d\npost-%d\n", n, 7*n, n)
	return spec, Job{Name: name, PreCheckpoint: pre, Tag: "mid", FinalCmd: final, Want: want}
}

// load submits jobs, keeping at most inflight of them unfinished, until
// total are submitted (total > 0) or until is past (total 0), and polls their
// statuses until every one is terminal or ctx is done. With both total and
// until, the total is spread over the time to until (so a fixed number of
// jobs meets every fault of a schedule).
type load struct {
	q        *jobs.Queue
	run      string
	total    int
	start    time.Time
	until    time.Time
	inflight int
	logf     func(string, ...any)

	mu        sync.Mutex
	next      int // number of the next job spec: a failed submit's is not reused
	jobs      []*Job
	done      int
	succeeded []time.Time // when each job was seen succeeded
	first     time.Time
}

func (l *load) submitting() bool {
	if l.total > 0 {
		return len(l.jobs) < l.total
	}
	return time.Now().Before(l.until)
}

// due reports whether the next job may be submitted now: always, unless a
// total is spread over a duration and the next one is ahead of its pace.
func (l *load) due() bool {
	if l.total == 0 || !l.until.After(l.start) {
		return true
	}
	frac := float64(time.Since(l.start)) / float64(l.until.Sub(l.start))
	return float64(len(l.jobs)) < frac*float64(l.total)+1
}

// run returns when every submitted job is terminal, or with ctx's error.
func (l *load) runLoad(ctx context.Context) error {
	open := map[string]*Job{}
	var lastLog time.Time
	for {
		l.mu.Lock()
		for l.submitting() && l.due() && len(open) < l.inflight {
			// A submit that timed out may still have been stored; the retry
			// is a job of another name, so the two never share sessions.
			l.next++
			spec, j := jobSpec(l.run, l.next)
			// Every NATS call has a deadline of its own: a request lost in a
			// node's failover is retried instead of waited for until the
			// load's deadline. A retried submit that had in fact been stored
			// is a job of its own, run like any other, outside the checks.
			sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			st, err := l.q.Submit(sctx, spec)
			cancel()
			if err != nil {
				l.mu.Unlock()
				l.logf("submit %s: %v (retrying)", spec.Name, err)
				if ctx.Err() != nil {
					return ctx.Err()
				}
				sleep(ctx, time.Second)
				l.mu.Lock()
				continue
			}
			if l.first.IsZero() {
				l.first = time.Now()
			}
			j.ID, j.Status = st.ID, st
			l.jobs = append(l.jobs, &j)
			open[st.ID] = &j
		}
		submitting := l.submitting()
		l.mu.Unlock()
		if !submitting && len(open) == 0 {
			return nil
		}
		for id, j := range open {
			sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			st, err := l.q.Status(sctx, id)
			cancel()
			if err != nil {
				continue // NATS may be failing over; read it again next round
			}
			l.mu.Lock()
			j.Status = st
			if st.State.Terminal() {
				delete(open, id)
				l.done++
				if st.State == jobs.StateSucceeded {
					l.succeeded = append(l.succeeded, time.Now())
				} else {
					l.logf("job %s (%s) %s: %s", id[:8], j.Name, st.State, st.Error)
				}
			}
			l.mu.Unlock()
		}
		if time.Since(lastLog) > 15*time.Second {
			lastLog = time.Now()
			l.mu.Lock()
			l.logf("jobs: %d submitted, %d finished, %d open", len(l.jobs), l.done, len(open))
			l.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(300 * time.Millisecond):
		}
	}
}

// succeededSince counts the jobs seen succeeded after t.
func (l *load) succeededSince(t time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, s := range l.succeeded {
		if s.After(t) {
			n++
		}
	}
	return n
}

// open counts the submitted jobs not finished.
func (l *load) open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.jobs) - l.done
}

// busy reports, for each worker id, whether one of its jobs is near its end
// (the last step, or done): a SIGKILL then can fall between the session's
// close and the job's acknowledgement, a window the fault schedule avoids.
func (l *load) nearEnd() map[string]bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]bool{}
	for _, j := range l.jobs {
		st := j.Status
		if st.State == jobs.StateRunning && st.Done >= st.Steps-2 {
			out[st.Worker] = true
		}
	}
	return out
}

// running reads the status of every open job afresh and returns those
// running (their statuses name the worker); a job whose status cannot be
// read is left out.
func (l *load) running(ctx context.Context) []LostJob {
	l.mu.Lock()
	var open []*Job
	for _, j := range l.jobs {
		if !j.Status.State.Terminal() {
			open = append(open, j)
		}
	}
	l.mu.Unlock()
	var out []LostJob
	for _, j := range open {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		st, err := l.q.Status(sctx, j.ID)
		cancel()
		if err != nil || st.State != jobs.StateRunning {
			continue
		}
		out = append(out, LostJob{ID: j.ID, Name: j.Name, Status: st})
	}
	return out
}
