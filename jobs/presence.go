package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// maxPresenceEvery bounds the period of a worker's presence heartbeat: its
// lease Heartbeat, or this when that is longer.
const maxPresenceEvery = 5 * time.Second

// WorkerInfo is a Worker's presence record, kept in the queue's workers
// bucket under its id while it runs: put when Run starts, refreshed every
// EveryMs (its heartbeat), deleted when Run returns. The record of a worker
// that died stops being refreshed and expires from the bucket after an hour.
type WorkerInfo struct {
	ID          string `json:"id"`
	Host        string `json:"host,omitempty"`
	PID         int    `json:"pid,omitempty"`
	Concurrency int    `json:"concurrency"`
	// Running are the ids of the jobs the worker runs, sorted.
	Running []string `json:"running"`
	// Draining is set once the worker was asked to stop: it takes no new
	// job and hands its jobs back after their current step.
	Draining    bool  `json:"draining,omitempty"`
	StartedAt   int64 `json:"startedAt"`   // Unix ms
	HeartbeatAt int64 `json:"heartbeatAt"` // Unix ms, when the record was last put
	EveryMs     int64 `json:"everyMs"`     // the period of its heartbeats
}

// Live reports whether the worker heartbeat within three of its periods
// before now: a worker that missed more is presumably dead.
func (i WorkerInfo) Live(now time.Time) bool {
	return now.UnixMilli()-i.HeartbeatAt <= 3*max(i.EveryMs, 1)
}

// Workers returns the presence records of the workers in the workers
// bucket, live or not (WorkerInfo.Live tells), sorted by id. A record that
// cannot be read or decoded is skipped.
func (q *Queue) Workers(ctx context.Context) ([]WorkerInfo, error) {
	keys, err := q.workers.Keys(ctx, jetstream.IgnoreDeletes())
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return []WorkerInfo{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list workers: %w", err)
	}
	out := make([]WorkerInfo, 0, len(keys))
	for _, k := range keys {
		e, err := q.workers.Get(ctx, k)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			continue
		}
		var wi WorkerInfo
		if json.Unmarshal(e.Value(), &wi) == nil {
			out = append(out, wi)
		}
	}
	slices.SortFunc(out, func(a, b WorkerInfo) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// announce keeps w's presence record in the workers bucket until the
// returned stop is called, which deletes it: put at once, again every
// heartbeat with the jobs running here, and with Draining once ctx (Run's)
// is done. A record that cannot be written is logged: presence is for
// people to look at, the jobs do not depend on it.
func (w *Worker) announce(ctx context.Context) (stop func()) {
	every := min(w.Heartbeat, maxPresenceEvery)
	host, _ := os.Hostname()
	info := WorkerInfo{ID: w.ID, Host: host, PID: os.Getpid(), Concurrency: w.Concurrency,
		StartedAt: time.Now().UnixMilli(), EveryMs: every.Milliseconds()}
	bctx := context.WithoutCancel(ctx) // the record outlives the drain
	put := func() {
		info.Running, info.HeartbeatAt = w.runningJobs(), time.Now().UnixMilli()
		data, err := json.Marshal(info)
		if err != nil {
			return
		}
		pctx, cancel := context.WithTimeout(bctx, max(every, time.Second))
		defer cancel()
		if _, err := w.Queue.workers.Put(pctx, w.ID, data); err != nil {
			w.Logger.Warn("jobs: record this worker's presence", "err", err)
		}
	}
	done := make(chan struct{})
	var bg sync.WaitGroup
	bg.Go(func() {
		put()
		t := time.NewTicker(every)
		defer t.Stop()
		drain := ctx.Done()
		for {
			select {
			case <-done:
				return
			case <-drain:
				drain, info.Draining = nil, true
				put()
			case <-t.C:
				put()
			}
		}
	})
	return func() {
		close(done)
		bg.Wait()
		dctx, cancel := context.WithTimeout(bctx, 5*time.Second)
		defer cancel()
		if err := w.Queue.workers.Delete(dctx, w.ID); err != nil {
			w.Logger.Warn("jobs: remove this worker's presence", "err", err)
		}
	}
}

// runningJobs returns the ids of the jobs running in w, sorted.
func (w *Worker) runningJobs() []string {
	w.mu.Lock()
	ids := make([]string, 0, len(w.local))
	for id := range w.local {
		ids = append(ids, id)
	}
	w.mu.Unlock()
	slices.Sort(ids)
	return ids
}
