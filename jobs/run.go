package jobs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	alineo "github.com/alineo-labs/alineo"
	"github.com/alineo-labs/alineo/internal/spans"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// StepState is what a progress Event reports.
type StepState string

// Step states.
const (
	StepStarted  StepState = "started"  // a step began
	StepDone     StepState = "done"     // a step ran live and succeeded
	StepReplayed StepState = "replayed" // an exec before the resume point, answered from the replay cache
	StepSkipped  StepState = "skipped"  // a file write or checkpoint before the resume point
	StepFailed   StepState = "failed"   // a step failed; the job fails
	StepSandbox  StepState = "sandbox"  // the job's sandbox is ready (Index -1)
	StepDrained  StepState = "drained"  // the job stopped early to be handed back (Index -1)
	StepStopped  StepState = "stopped"  // Runner.Stop stopped the job before a step (Index -1)
)

// Event is one progress report of a Runner.
type Event struct {
	Job       string // the spec's name
	SandboxID string
	Index     int // the step's position in Spec.Steps, 0-based; -1 for the job itself
	Total     int // len(Spec.Steps)
	Kind      StepKind
	Desc      string // Step.Describe, or a job-level note
	State     StepState
	ExitCode  int           // for exec steps that completed
	Elapsed   time.Duration // for done, replayed and failed
	Err       error         // for failed
}

// Checkpoint is a point a job can be resumed from: the checkpoint tagged Tag
// of the session (Name, SandboxID), after which the job goes on with step Next.
type Checkpoint struct {
	SandboxID string `json:"sandboxId"`
	Name      string `json:"name"`
	Tag       string `json:"tag"`
	Next      int    `json:"next"`
}

// Result summarises a finished run.
type Result struct {
	SandboxID string        `json:"sandboxId"`
	Name      string        `json:"name"`
	Live      int           `json:"live"`     // steps that ran live
	Replayed  int           `json:"replayed"` // steps answered from the replay cache or skipped
	Elapsed   time.Duration `json:"elapsed"`
}

// ResumeFunc restores the session (cp.Name, cp.SandboxID) from its checkpoint
// tagged cp.Tag and returns its handle with the replay cache in place
// (alineo.Client.Resume).
type ResumeFunc func(ctx context.Context, cp Checkpoint) (*alineo.Sandbox, error)

// Runner executes specs through the SDK. Client is required; every other zero
// value is valid. A Runner may run several jobs at once; its callbacks are
// called from the goroutine running the job.
type Runner struct {
	Client *alineo.Client
	// Resume restores a checkpointed session. Default ClientResume(Client)
	// with Metadata attached; when that is nil too, Run with a Checkpoint
	// fails with ErrResumeUnavailable.
	Resume ResumeFunc
	// Metadata is attached on the server to the sandbox Run creates, and to
	// the one the default Resume restores (a Resume of your own attaches
	// what it likes). The Worker tags every sandbox of a job with it
	// (JobMetadata) to find the ones an attempt that died left behind.
	Metadata map[string]string
	// Timeout is the time to live of the sandbox Run creates, and of the one
	// the default Resume restores (alineo.SandboxOptions.Timeout): 0 for
	// none, else whole seconds and at least alineo.MinTimeout. The Worker
	// sets it and renews the sandbox while the job runs.
	Timeout time.Duration
	// Progress receives every Event, synchronously. Nil discards them.
	Progress func(Event)
	// OnSandbox is called once the job's sandbox (new or resumed) is ready; an
	// error stops the job. The worker records the sandbox in the job's status.
	OnSandbox func(ctx context.Context, sb *alineo.Sandbox) error
	// OnCheckpoint is called after each checkpoint is taken; an error stops
	// the job. The worker records the resume point in the job's status.
	OnCheckpoint func(ctx context.Context, cp Checkpoint) error
	// Drain, when closed, makes Run stop after the current step: it takes a
	// checkpoint (unless the step just done was one), reports it through
	// OnCheckpoint and returns ErrDrained.
	Drain <-chan struct{}
	// Stop, when set, is called before each live step with the step's
	// index; an error stops the job there: Run closes the sandbox and
	// returns that error. The Worker stops a canceled job this way.
	Stop func(ctx context.Context, next int) error
	// Output receives each live exec's stdout and stderr as they are
	// recorded, interleaved. Nil discards them.
	Output io.Writer
	// TracerProvider receives the spans job.run (one per Run) and job.step
	// (one per step, its sandbox.exec or sandbox.checkpoint inside).
	// Default: the global provider.
	TracerProvider trace.TracerProvider
	// Actor, when set, is who the entries of the job's sandbox are recorded
	// as caused by (alineo.WithActor around the create or the Resume); the
	// Worker sets JobActor(submitter, its ID). Default: the Client's.
	Actor string
}

// Run runs spec's steps in a new sandbox with progress reported to progress
// (nil for none). It is (&Runner{Client: client, Progress: progress}).Run(ctx, spec, nil).
func Run(ctx context.Context, client *alineo.Client, spec Spec, progress func(Event)) (Result, error) {
	r := &Runner{Client: client, Progress: progress}
	return r.Run(ctx, spec, nil)
}

// Run validates spec and runs it. With from nil it creates a sandbox and runs
// every step live. With from set it resumes from.SandboxID from the checkpoint
// from.Tag and calls every step again: exec steps before from.Next are
// answered by the replay cache, file writes and checkpoints before it are
// skipped, the rest run live.
//
// The sandbox is closed before Run returns, unless the process dies first.
// Errors: *SpecError; *StepError for the step that failed (wrapping the SDK's
// error); ErrDrained; ErrResumeUnavailable; the SDK's errors from creating or
// resuming the sandbox.
func (r *Runner) Run(ctx context.Context, spec Spec, from *Checkpoint) (res Result, err error) {
	start := time.Now()
	ctx, span := r.tracer().Start(ctx, "job.run", trace.WithAttributes(attribute.String("alineo.job.name", spec.Name),
		attribute.Bool("alineo.job.resumed", from != nil)))
	defer func() {
		span.SetAttributes(attribute.String("alineo.sandbox.id", res.SandboxID),
			attribute.Int("alineo.job.steps_live", res.Live), attribute.Int("alineo.job.steps_replayed", res.Replayed))
		spans.End(span, err)
	}()
	if r.Client == nil {
		return res, fmt.Errorf("%w: Runner.Client is nil", ErrInvalidConfig)
	}
	if err := spec.Validate(); err != nil {
		return res, err
	}
	if r.Actor != "" {
		ctx = alineo.WithActor(ctx, r.Actor)
	}
	next := 0
	var sb *alineo.Sandbox
	if from != nil {
		if from.Next < 0 || from.Next > len(spec.Steps) {
			return res, fmt.Errorf("%w: resume point %d outside the spec's %d steps", ErrInvalidConfig, from.Next, len(spec.Steps))
		}
		resume := r.Resume
		if resume == nil {
			resume = clientResume(r.Client, r.Metadata, r.Timeout)
		}
		if resume == nil {
			return res, ErrResumeUnavailable
		}
		sb, err = resume(ctx, *from)
		if err != nil {
			return res, fmt.Errorf("resume %s from %q: %w", from.SandboxID, from.Tag, err)
		}
		next = from.Next
	} else {
		sb, err = r.Client.Sandbox(ctx, alineo.SandboxOptions{
			Image: spec.Image, Name: spec.Name, Env: spec.Env, Metadata: r.Metadata, Timeout: r.Timeout,
			Resources: alineo.Resources{CPU: spec.Resources.CPU, Memory: spec.Resources.Memory, GPU: spec.Resources.GPU},
		})
		if err != nil {
			return res, err // the SDK's error names the operation
		}
	}
	res.SandboxID, res.Name = sb.ID(), sb.Name()
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if cerr := sb.Close(cctx); cerr != nil && !errors.Is(cerr, alineo.ErrClosed) {
			err = errors.Join(err, fmt.Errorf("close sandbox: %w", cerr))
		}
		res.Elapsed = time.Since(start)
	}()
	desc := "created"
	if from != nil {
		desc = fmt.Sprintf("resumed %s from checkpoint %q (replaying %d steps)", from.SandboxID, from.Tag, from.Next)
	}
	r.report(Event{Job: spec.Name, SandboxID: sb.ID(), Index: -1, Total: len(spec.Steps), State: StepSandbox, Desc: desc})
	if r.OnSandbox != nil {
		if err := r.OnSandbox(ctx, sb); err != nil {
			return res, err
		}
	}
	lastCheckpoint := next - 1 // -1 for a fresh run; the resumed checkpoint's step otherwise
	for i, st := range spec.Steps {
		ev := Event{Job: spec.Name, SandboxID: sb.ID(), Index: i, Total: len(spec.Steps), Kind: st.Kind(), Desc: st.Describe()}
		sctx, sspan := r.stepSpan(ctx, i, st)
		report := func(ev Event) { // reports ev, ending the step's span unless it only started
			r.report(ev)
			if ev.State != StepStarted {
				endStepSpan(sspan, ev)
			}
		}
		if i < next {
			if st.Kind() == KindExec || st.Kind() == KindExecCode {
				t0 := time.Now()
				code, err := r.exec(sctx, sb, st, io.Discard)
				if err != nil {
					ev.State, ev.Err, ev.Elapsed = StepFailed, err, time.Since(t0)
					report(ev)
					return res, &StepError{Index: i, Kind: st.Kind(), Err: err}
				}
				ev.State, ev.ExitCode, ev.Elapsed = StepReplayed, code, time.Since(t0)
			} else {
				ev.State = StepSkipped
			}
			res.Replayed++
			report(ev)
			continue
		}
		if r.Stop != nil {
			if err := r.Stop(ctx, i); err != nil {
				sspan.End()
				r.report(Event{Job: spec.Name, SandboxID: sb.ID(), Index: -1, Total: len(spec.Steps), State: StepStopped,
					Desc: fmt.Sprintf("stopped before step %d", i+1), Err: err})
				return res, err
			}
		}
		if i > 0 && r.draining() { // between steps: honour a drain request
			sspan.End()
			return res, r.drain(ctx, spec, sb, i, lastCheckpoint == i-1)
		}
		ev.State = StepStarted
		report(ev)
		t0 := time.Now()
		code, err := r.step(sctx, spec, sb, i, st)
		ev.Elapsed = time.Since(t0)
		if err != nil {
			ev.State, ev.Err = StepFailed, err
			report(ev)
			if errors.Is(err, ErrDrained) {
				return res, err
			}
			return res, &StepError{Index: i, Kind: st.Kind(), Err: err}
		}
		if st.Kind() == KindCheckpoint {
			lastCheckpoint = i
		}
		ev.State, ev.ExitCode = StepDone, code
		res.Live++
		report(ev)
	}
	return res, nil
}

func (r *Runner) report(ev Event) {
	if r.Progress != nil {
		r.Progress(ev)
	}
}

func (r *Runner) draining() bool {
	if r.Drain == nil {
		return false
	}
	select {
	case <-r.Drain:
		return true
	default:
		return false
	}
}

// drain checkpoints before step next (unless one was just taken) and returns ErrDrained.
func (r *Runner) drain(ctx context.Context, spec Spec, sb *alineo.Sandbox, next int, justCheckpointed bool) error {
	ev := Event{Job: spec.Name, SandboxID: sb.ID(), Index: -1, Total: len(spec.Steps), State: StepDrained}
	if !justCheckpointed {
		tag := DrainTagPrefix + strconv.Itoa(next)
		if err := r.checkpoint(ctx, sb, tag, next); err != nil {
			ev.Desc, ev.Err = fmt.Sprintf("drained before step %d without a checkpoint", next+1), err
			r.report(ev)
			return fmt.Errorf("%w (checkpoint failed: %w)", ErrDrained, err)
		}
		ev.Desc = fmt.Sprintf("drained before step %d; checkpoint %q", next+1, tag)
	} else {
		ev.Desc = fmt.Sprintf("drained before step %d, right after a checkpoint", next+1)
	}
	r.report(ev)
	return ErrDrained
}

// step runs one live step and returns the exit code of an exec.
func (r *Runner) step(ctx context.Context, spec Spec, sb *alineo.Sandbox, i int, st Step) (int, error) {
	switch st.Kind() {
	case KindExec, KindExecCode:
		out := r.Output
		if out == nil {
			out = io.Discard
		}
		return r.exec(ctx, sb, st, out)
	case KindWriteFile:
		data, err := st.WriteFile.Data()
		if err != nil {
			return 0, err
		}
		return 0, sb.WriteFile(ctx, st.WriteFile.Path, data)
	case KindCheckpoint:
		return 0, r.checkpoint(ctx, sb, st.Checkpoint.Tag, i+1)
	}
	return 0, &SpecError{Path: fmt.Sprintf("steps[%d]", i), Reason: "no step kind set"}
}

func (r *Runner) exec(ctx context.Context, sb *alineo.Sandbox, st Step, out io.Writer) (int, error) {
	var x *alineo.Exec
	if st.Exec != nil {
		x = sb.Exec(ctx, st.Exec.Command, alineo.ExecOptions{
			Cwd: st.Exec.Cwd, Env: st.Exec.Env, Timeout: time.Duration(st.Exec.Timeout), Strict: st.Exec.Strict,
		})
	} else {
		x = sb.ExecCode(ctx, st.ExecCode.Code, alineo.CodeOptions{Language: st.ExecCode.Language, Strict: st.ExecCode.Strict})
	}
	if err := x.Pipe(out, out); err != nil {
		return x.ExitCode(), err
	}
	res, err := x.Wait()
	return res.ExitCode, err
}

func (r *Runner) checkpoint(ctx context.Context, sb *alineo.Sandbox, tag string, next int) error {
	if _, err := sb.Checkpoint(ctx, tag); err != nil {
		return err
	}
	if r.OnCheckpoint != nil {
		return r.OnCheckpoint(ctx, Checkpoint{SandboxID: sb.ID(), Name: sb.Name(), Tag: tag, Next: next})
	}
	return nil
}

func (r *Runner) tracer() trace.Tracer {
	tp := r.TracerProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return tp.Tracer("github.com/alineo-labs/alineo/jobs")
}

// stepSpan starts the job.step span of step i.
func (r *Runner) stepSpan(ctx context.Context, i int, st Step) (context.Context, trace.Span) {
	return r.tracer().Start(ctx, "job.step", trace.WithAttributes(attribute.Int("alineo.job.step", i),
		attribute.String("alineo.job.step_kind", string(st.Kind())), attribute.String("alineo.job.step_desc", st.Describe())))
}

// endStepSpan ends a step's span with the state ev reports.
func endStepSpan(span trace.Span, ev Event) {
	span.SetAttributes(attribute.String("alineo.job.step_state", string(ev.State)))
	if ev.Kind == KindExec || ev.Kind == KindExecCode {
		span.SetAttributes(attribute.Int("process.exit_code", ev.ExitCode))
	}
	spans.End(span, ev.Err)
}
