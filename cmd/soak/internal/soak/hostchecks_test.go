package soak

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/jobs"
)

// goodHostObservation is goodObservation on two hosts: job 2 ran on h1,
// which was killed after the job's checkpoint (its executor's last entry);
// h2 took the job over from the checkpoint and finished it. Every
// checkpoint's blobs are in the bucket; both hosts are back with nothing
// running.
func goodHostObservation() *Observation {
	o := goodObservation()
	o.Hosts = []string{"h1", "h2"}
	o.ExecutorHosts = map[string]string{"h1-executor-1": "h1", "h2-executor-1": "h2"}
	for i := range o.Jobs {
		o.Jobs[i].Status.Worker = "h2-executor-1"
	}
	j := o.Jobs[1]
	var killedAt int64
	for _, m := range o.Stream {
		if e := m.Entry; e != nil && e.SandboxID == "sb-2" && e.Event == events.ExecStarted && e.StepIndex == 3 {
			killedAt = e.Ts + 500
		}
	}
	o.HostLosses = []HostLoss{{Kind: FaultKillHost, Host: "h1", At: time.UnixMilli(killedAt), Jobs: []LostJob{{
		ID: j.ID, Name: j.Name,
		Status: jobs.Status{ID: j.ID, Name: j.Name, State: jobs.StateRunning, Worker: "h1-executor-1", SandboxID: "sb-2",
			Checkpoint: &jobs.Checkpoint{SandboxID: "sb-2", Name: j.Name, Tag: j.Tag, Next: 4}},
	}}}}
	o.HostSandboxes = map[string][]string{"h1": nil, "h2": nil}
	o.HostErrs = map[string]string{}
	o.Checkpoints = []CheckpointRefs{{Store: "shared", ID: "ckpt-1", Keys: []string{"k1", "k2"}}, {Store: "shared", ID: "ckpt-2", Keys: []string{"k1"}}}
	o.Blobs = map[string]map[string]bool{"shared": {"k1": true, "k2": true, "k3": true}}
	return o
}

func TestHostChecksPassOnAGoodRun(t *testing.T) {
	o := goodHostObservation()
	rs := RunChecks(o)
	if got, want := len(rs), len(Checks)+len(HostChecks); got != want {
		t.Fatalf("%d checks ran, want %d", got, want)
	}
	for _, r := range rs {
		if !r.Pass {
			t.Errorf("%s: FAIL %s", r.Check, r.Detail)
		}
	}
	if d := results(o)[HostChecks[0].Name].Detail; !strings.Contains(d, "1 jobs of 1 lost hosts") || !strings.Contains(d, "1 resumed") {
		t.Errorf("detail %q", d)
	}
	// A single-host run has the 9 checks only.
	if got := len(RunChecks(goodObservation())); got != len(Checks) {
		t.Errorf("a single-host run ran %d checks, want %d", got, len(Checks))
	}
}

// Each case breaks one property of a multi-host run and expects its check
// to fail, naming the problem; the other host checks pass (also lists the
// 9 checks the breakage fails as well).
func TestEachHostCheckFailsWhenItsPropertyIsBroken(t *testing.T) {
	lost := func(o *Observation) Job { return o.Jobs[1] }
	cases := []struct {
		name, check, want string
		also              []string
		breakIt           func(o *Observation)
	}{
		{"the lost job failed", HostChecks[0].Name, "failed", []string{Checks[0].Name}, func(o *Observation) {
			o.Jobs[1].Status.State = jobs.StateFailed
		}},
		{"the lost job finished on the lost host", HostChecks[0].Name, "not another host", nil, func(o *Observation) {
			o.Jobs[1].Status.Worker = "h1-executor-1"
		}},
		{"the lost job's worker is on no host", HostChecks[0].Name, "not another host", nil, func(o *Observation) {
			o.Jobs[1].Status.Worker = "executor-9"
		}},
		{"the lost session finished the job after the loss", HostChecks[0].Name, "lost session completed the final step after the loss", []string{Checks[0].Name}, func(o *Observation) {
			s := streamOf(o)
			s.exec(lost(o).Name, "sb-2", 9, lost(o).FinalCmd, lost(o).Want) // a zombie, under its old fence
			o.Stream = s.msgs
		}},
		{"two sessions finished the lost job after the loss", HostChecks[0].Name, "completed 2 times", []string{Checks[0].Name}, func(o *Observation) {
			s := streamOf(o)
			s.fence("sb-2-twin")
			s.add(lost(o).Name, "sb-2-twin", events.SandboxLevel, events.SandboxCreated, events.SandboxCreatedPayload{SandboxID: "sb-2-twin", SnapshotID: "snap"})
			s.exec(lost(o).Name, "sb-2-twin", 4, lost(o).FinalCmd, lost(o).Want)
			o.Stream = s.msgs
		}},
		{"the lost job started over instead of resuming", HostChecks[0].Name, `started from ""`, nil, func(o *Observation) {
			setSnapshot(o, "sb-2-resumed", "")
		}},
		{"the lost job resumed from another checkpoint", HostChecks[0].Name, `started from "other"`, nil, func(o *Observation) {
			setSnapshot(o, "sb-2-resumed", "other")
		}},
		{"no job was on a lost host", HostChecks[0].Name, "no job was running", nil, func(o *Observation) {
			o.HostLosses[0].Jobs = nil
		}},
		{"no host was lost", HostChecks[0].Name, "0 losses", nil, func(o *Observation) {
			o.HostLosses = nil
		}},
		{"a lost job that is not the run's", HostChecks[0].Name, "not among the run's jobs", nil, func(o *Observation) {
			o.HostLosses[0].Jobs[0].ID = "ffff"
		}},
		{"a checkpoint's blob is missing", HostChecks[1].Name, "ckpt-1 (shared) references blob k2", nil, func(o *Observation) {
			delete(o.Blobs["shared"], "k2")
		}},
		{"a checkpoint names a blob of another store", HostChecks[1].Name, "references blob k1", nil, func(o *Observation) {
			o.Checkpoints[1].Store = "h1"
		}},
		{"no checkpoint in the stores", HostChecks[1].Name, "no checkpoint", nil, func(o *Observation) {
			o.Checkpoints = nil
		}},
		{"the bucket could not be listed", HostChecks[1].Name, "list the blobs", nil, func(o *Observation) {
			o.BlobsErr = []string{"list the blobs of shared: permission denied"}
		}},
		{"a host is not back", HostChecks[2].Name, "h1: not back", []string{Checks[5].Name}, func(o *Observation) {
			o.HostErrs["h1"] = "sandboxd list: connection refused"
			o.SandboxdLive = []string{"h1: sandboxd list: connection refused"}
		}},
		{"a sandbox left running on a host", HostChecks[2].Name, "h2: sandbox abc Running", []string{Checks[5].Name}, func(o *Observation) {
			o.HostSandboxes["h2"] = []string{"abc Running"}
			o.SandboxdLive = []string{"h2: abc Running"}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := goodHostObservation()
			c.breakIt(o)
			settle(o)
			for name, r := range results(o) {
				switch {
				case name == c.check && r.Pass:
					t.Errorf("%s passed; want it to fail", name)
				case name == c.check && !strings.Contains(r.Detail, c.want):
					t.Errorf("%s: detail %q, want it to mention %q", name, r.Detail, c.want)
				case name != c.check && !r.Pass && !slices.Contains(c.also, name):
					t.Errorf("%s failed too: %s", name, r.Detail)
				}
			}
		})
	}
}

// setSnapshot sets the snapshot session id's sandbox.created says it was
// created from.
func setSnapshot(o *Observation, id, snapshot string) {
	for _, m := range o.Stream {
		if e := m.Entry; e != nil && e.SandboxID == id && e.Event == events.SandboxCreated {
			ne := events.New(e.Ts, e.Name, e.SandboxID, e.StepIndex, e.Event,
				events.SandboxCreatedPayload{SandboxID: id, ResumedFrom: "sb-2", SnapshotID: snapshot})
			ne.Seq = e.Seq
			*e = ne
		}
	}
}

// A job whose final step completed on the lost host just before the loss
// is no problem of the host's: it is counted apart, and has no recovery.
func TestLostJobFinishedBeforeTheLoss(t *testing.T) {
	o := goodHostObservation()
	j := o.Jobs[0] // finished in sb-1 on h2; say h2 was lost after that
	o.HostLosses = append(o.HostLosses, HostLoss{Kind: FaultPartitionHost, Host: "h2", At: time.UnixMilli(tsOf(uint64(len(o.Stream))) + 1),
		Jobs: []LostJob{{ID: j.ID, Name: j.Name, Status: jobs.Status{State: jobs.StateRunning, Worker: "h2-executor-1", SandboxID: "sb-1"}}}})
	r := results(o)[HostChecks[0].Name]
	if !r.Pass || !strings.Contains(r.Detail, "1 finished just before the loss") {
		t.Fatalf("%+v", r)
	}
	if got := recoveries(o); len(got) != 1 || got[0].Job != o.Jobs[1].Name {
		t.Fatalf("recoveries %+v, want job 2's only", got)
	}
}

// The time from a host's loss to its job running again elsewhere is the
// first session of the job created after the loss; a job never seen again
// has -1.
func TestRecoveries(t *testing.T) {
	o := goodHostObservation()
	var created int64
	for _, m := range o.Stream {
		if e := m.Entry; e != nil && e.SandboxID == "sb-2-resumed" && e.Event == events.SandboxCreated {
			created = e.Ts
		}
	}
	rs := recoveries(o)
	want := time.Duration(created-o.HostLosses[0].At.UnixMilli()) * time.Millisecond
	if len(rs) != 1 || rs[0].Took != want || rs[0].Host != "h1" {
		t.Fatalf("recoveries = %+v, want one of %s on h1", rs, want)
	}
	// The host was back before the job ran again: the new session counts
	// only as the finishing one on another host's executor.
	o.HostLosses[0].Back = time.UnixMilli(created - 1)
	if rs := recoveries(o); len(rs) != 1 || rs[0].Took != want {
		t.Fatalf("recoveries = %+v, want one of %s (the finishing session, on h2)", rs, want)
	}
	o.Jobs[1].Status.Worker = "h1-executor-1" // it ran again on h1, once back
	if rs := recoveries(o); len(rs) != 1 || rs[0].Took != -1 {
		t.Fatalf("recoveries = %+v, want one never seen elsewhere (-1)", rs)
	}
	o = goodHostObservation()
	o.HostLosses[0].At = time.UnixMilli(created + 1) // after every session
	if rs := recoveries(o); len(rs) != 1 || rs[0].Took != -1 {
		t.Fatalf("recoveries = %+v, want one never seen (-1)", rs)
	}
	var fg Figures
	fg.hostRecoveryFigures([]Recovery{{Took: time.Second}, {Took: 3 * time.Second}, {Took: 2 * time.Second}, {Took: -1}})
	if fg.HostRecoveryP50 != 2*time.Second || fg.HostRecoveryP99 != 3*time.Second || fg.HostRecoveriesSeen != 3 || fg.HostRecoveriesUnseen != 1 {
		t.Fatalf("figures %+v", fg)
	}
	rep := &Report{Seed: 1, Results: RunChecks(goodHostObservation()), Figures: fg}
	var b strings.Builder
	rep.Print(&b)
	if !strings.Contains(b.String(), "host loss to its jobs running again elsewhere: p50 2s p99 3s (3 jobs; 1 never seen running again)") {
		t.Fatalf("report:\n%s", b.String())
	}
	fg = Figures{}
	fg.hostRecoveryFigures([]Recovery{{Took: -1}, {Took: -1}})
	rep.Figures = fg
	b.Reset()
	rep.Print(&b)
	if !strings.Contains(b.String(), "running again elsewhere: none seen (2 jobs never seen running again)") {
		t.Fatalf("report:\n%s", b.String())
	}
}

func TestBlobKeys(t *testing.T) {
	body := `{"id":"c1","threadId":"t","files":[{"path":"a","kind":"file","blobKey":"k1"},{"path":"d","kind":"dir"},
		{"path":"l","kind":"symlink","target":"a"},{"path":"b","kind":"file","blobKey":"k1"}],
		"artifacts":[{"artifactId":"x","name":"n","mimeType":"text/plain","size":1,"blobKey":"k9"}]}`
	got, err := blobKeys([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"k1", "k1", "k9"}; !slices.Equal(got, want) {
		t.Fatalf("keys = %v, want %v", got, want)
	}
	if _, err := blobKeys([]byte("{")); err == nil {
		t.Fatal("a body that does not decode gave no error")
	}
}

// The bucket's blobs are the names of its files, wherever they are below
// it; a temporary directory's are not.
func TestListBlobs(t *testing.T) {
	dir := t.TempDir()
	for _, p := range []string{"sha256/ab/abcd", "sha256/ef/ef01", ".sgwtmp/ab/abff", "sha256/ab/.part"} {
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, p), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := listBlobs(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || !got["abcd"] || !got["ef01"] {
		t.Fatalf("blobs = %v, want abcd and ef01", got)
	}
	if _, err := listBlobs(filepath.Join(dir, "none")); err == nil {
		t.Fatal("listing a bucket that is not there gave no error")
	}
}

// Every host's sandboxd gets the shared store and bucket unless the run
// keeps storage local: then it gets neither, nor the S3 credentials.
func TestSandboxdArgs(t *testing.T) {
	f := &Fleet{cfg: Config{}, CheckpointsDSN: "postgres://postgres@198.18.0.5:5432/checkpoints?sslmode=disable", S3Endpoint: "http://198.18.0.6:7070"}
	h := &Host{Name: "h1", Data: "/d/hosts/h1/sandboxd"}
	args, env := f.sandboxdArgs(h, 8080)
	joined := strings.Join(args, " ")
	for _, want := range []string{"--listen 0.0.0.0:8080", "--data /d/hosts/h1/sandboxd",
		"--checkpoints postgres://postgres@198.18.0.5:5432/checkpoints?sslmode=disable",
		"--blobs s3://alineo-soak?endpoint=http%3A%2F%2F198.18.0.6%3A7070&region=us-east-1&use_path_style=true"} {
		if !strings.Contains(joined, want) {
			t.Errorf("args %q lack %q", joined, want)
		}
	}
	if !slices.Contains(env, "AWS_ACCESS_KEY_ID="+s3Access) || !slices.Contains(env, "AWS_SECRET_ACCESS_KEY="+s3Secret) {
		t.Errorf("env %q lacks the S3 credentials", env)
	}
	if !slices.Contains(env, "TMPDIR=/d/hosts/h1/tmp") {
		t.Errorf("env %q lacks the host's own TMPDIR", env)
	}
	f.cfg.LocalStorage = true
	args, env = f.sandboxdArgs(h, 8080)
	if joined := strings.Join(args, " "); strings.Contains(joined, "--checkpoints") || strings.Contains(joined, "--blobs") || len(env) != 1 {
		t.Errorf("local storage: args %q, env %q", joined, env)
	}
}
