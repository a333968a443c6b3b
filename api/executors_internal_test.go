package api

import (
	"strings"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/jobs"
)

func TestJoinExecutors(t *testing.T) {
	now := time.UnixMilli(100_000)
	rec := func(id string, beat int64, draining bool, running ...string) jobs.WorkerInfo {
		return jobs.WorkerInfo{ID: id, HeartbeatAt: beat, EveryMs: 1000, Draining: draining, Running: running, Concurrency: 1}
	}
	run := func(id, worker string, state jobs.State) jobs.Status {
		return jobs.Status{ID: id, Name: id, Worker: worker, State: state}
	}
	for _, tc := range []struct {
		name string
		ws   []jobs.WorkerInfo
		sts  []jobs.Status
		want string // id:state:job,job per executor
	}{
		{"none", nil, nil, ""},
		{"live, just in time", []jobs.WorkerInfo{rec("a", 97_000, false)}, nil, "a:live:"},
		{"silent after three missed beats", []jobs.WorkerInfo{rec("a", 96_999, false)}, nil, "a:silent:"},
		{"draining", []jobs.WorkerInfo{rec("a", 99_000, true, "j1")}, []jobs.Status{run("j1", "a", jobs.StateRunning)}, "a:draining:j1"},
		{"a job its record names and one its status names, once each",
			[]jobs.WorkerInfo{rec("a", 99_000, false, "j1")},
			[]jobs.Status{run("j2", "a", jobs.StateRunning), run("j1", "a", jobs.StateRunning)}, "a:live:j1,j2"},
		{"workers only statuses name, by id, after the records; settled jobs ignored",
			[]jobs.WorkerInfo{rec("m", 99_000, false)},
			[]jobs.Status{run("j3", "z", jobs.StateRunning), run("j4", "b", jobs.StateRunning), run("j5", "c", jobs.StateSucceeded), run("j6", "", jobs.StateQueued)},
			"m:live: b:unknown:j4 z:unknown:j3"},
	} {
		l := joinExecutors(tc.ws, tc.sts, now)
		var got []string
		for _, x := range l.Executors {
			var ids []string
			for _, j := range x.Jobs {
				ids = append(ids, j.ID)
			}
			got = append(got, x.ID+":"+string(x.State)+":"+strings.Join(ids, ","))
		}
		if g := strings.Join(got, " "); g != tc.want || l.Now != now.UnixMilli() {
			t.Errorf("%s: %q (now %d), want %q", tc.name, g, l.Now, tc.want)
		}
	}
}
