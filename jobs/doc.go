// Package jobs is what the executor runs: the job spec (a JSON document naming
// an image, resources, environment and a list of steps), its strict decoding
// and validation, the Runner that executes a spec's steps through the SDK, and
// the fleet side: a Queue on the ALINEO_JOBS stream (work-queue retention) with
// each job's status in a JetStream KV bucket, and a Worker that pulls jobs,
// holds each one's lease by heartbeating it, and takes over a job whose
// previous worker died by resuming it from its last checkpoint.
//
// # The spec
//
//	{
//	  "name": "build",
//	  "image": "host",
//	  "resources": {"cpu": "1", "memory": "512Mi"},
//	  "env": {"CI": "1"},
//	  "steps": [
//	    {"writeFile": {"path": "/workspace/hello.sh", "content": "echo hello"}},
//	    {"exec": {"command": "sh /workspace/hello.sh", "timeout": "30s"}},
//	    {"checkpoint": {"tag": "after-setup"}},
//	    {"exec": {"command": "false", "strict": false}},
//	    {"execCode": {"code": "print(1)", "language": "python"}}
//	  ]
//	}
//
// Each step is an object with exactly one key: exec (command, strict, timeout,
// cwd, env), execCode (code, language, strict), writeFile (path, content,
// base64) or checkpoint (tag). Unknown fields are errors naming the field
// (*SpecError, wrapping ErrInvalidSpec); so are missing and out-of-range values.
//
// # Cancel, retry and presence
//
// Queue.Cancel cancels a job: one that no worker runs at once (the worker it
// is delivered to acknowledges it unrun), a running one by its worker before
// its next step: the Worker's Runner.Stop reads the job's status before each
// step, and a canceled job's session ends in the ledger with a sandbox.closed
// of reason ClosedCanceled. Queue.Retry submits the spec of a failed or
// canceled job again, as a new job naming it (RetryOf); the queue keeps each
// job's spec in a bucket of its own (ALINEO_JOB_SPECS) for this.
//
// A running Worker keeps a presence record (WorkerInfo: its jobs, its last
// heartbeat, whether it drains) in the ALINEO_WORKERS bucket, refreshed
// every few seconds and removed when Run returns; Queue.Workers lists them.
//
// # Takeover
//
// A job's status records its sandbox and, after each checkpoint step, the
// checkpoint's tag and the index of the step after it. A worker that receives a
// job whose status names a sandbox fences that sandbox's previous writer
// (bus.Ledger.Takeover) and resumes from the recorded checkpoint: every step
// before it is called again and the SDK answers the exec steps from its replay
// cache without running them, so they ran live exactly once; file writes and
// checkpoints before it are skipped (the restored snapshot holds their effect).
//
// The new delivery first records itself as the job's attempt (a compare-and-set
// on the status: an earlier attempt that fails or finishes afterwards finds
// itself superseded and leaves the job alone, and a job an earlier attempt
// settled meanwhile is acknowledged, never reopened), then ends the previous
// attempt's sandbox. An earlier attempt still running (its worker was cut off
// past its lease, and is back) reads the status before its next step, as for
// a cancel, and stops there when it names a later attempt. The fence stops a
// writer in another process; a previous attempt still running in this Worker
// (the job came back to it after its lease lapsed) writes through the same
// Ledger, so the Worker cancels it and waits for it to settle before the
// takeover.
//
// A delivery that fails for a reason not the job's own (a store or NATS
// unavailable, its sandbox lost) hands the job back: the next delivery comes
// a second later, twice as late after each further one, at most 30 s, until
// QueueConfig.MaxDeliver deliveries.
//
// # A sandbox server on every host
//
// Each Worker uses its own host's sandbox server; a job taken over on
// another host resumes there from its last checkpoint (the checkpoint must
// be in a store both servers share). The worker that takes a job over
// cannot reach the dead host's server, so nothing there would end the old
// sandbox. Three things do:
//
//   - Expiration. The Worker creates each sandbox with an expiration and,
//     while the job runs and its status shows the attempt still holds it,
//     renews it (OpenSandbox's renew-expiration) to Worker.SandboxTTL from
//     now every Worker.RenewEvery. The sandbox of a worker that died, or
//     that cannot read the job's status for longer than its lease, expires
//     on its own. A sandbox that expires under a live run stops the run,
//     and the job is handed back (not failed): the next delivery resumes it.
//   - Start-up. A Worker first ends the sandboxes on its server whose job
//     moved on (settled, or a later attempt, or another worker): what its
//     host left running when it died or was cut off.
//   - The ledger says what became of each: sandbox.closed carries the
//     outcome (events.OutcomeClosed, OutcomeExpired, OutcomeUnreachable).
//     The worker that takes a job over records "unreachable" for a sandbox
//     its server does not have; the host that comes back records, after
//     it, that it deleted it or that it had expired.
//
// Of this module it imports alineo, adapters, events, internal/spans and
// opensandbox only (the SDK and what it speaks), and nats.go's jetstream;
// never bus (a Worker fences through the Fencer it is given), a database
// driver, sandboxd or cmd.
package jobs
