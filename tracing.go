package alineo

import (
	"context"

	"github.com/alineo-labs/alineo/internal/spans"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// Traces. A Client records OpenTelemetry spans through Options.TracerProvider
// (default: the global provider, a no-op until one is installed). The names
// and attributes follow the TypeScript SDK's otel adapter:
//
//	sandbox.run         a handle's life, from create (or fork, restore, resume) to Close
//	  sandbox.exec      one Exec or ExecCode: alineo.exec.seq, alineo.exec.cmd,
//	                    process.exit_code, alineo.exec.replayed, byte counts
//	  sandbox.checkpoint alineo.snapshot.id, alineo.checkpoint.name
//	  sandbox.pause, sandbox.resume (Pause and Resume of the container)
//	  sandbox.fork      the child's sandbox.run is started inside it
//	session.resume      Client.Resume: the new handle's sandbox.run is inside it
//	sandbox.restore     Client.RestoreSnapshot
//	environment.build   an environment's build sandbox and checkpoint
//
// Every ledger entry carries the W3C trace context of the span it was written
// under (events.Entry.Trace); the bus puts it in the message's headers, so a
// projector's apply span links to the exec that wrote the event.

// instrumentation names the SDK's tracer.
const instrumentation = "github.com/alineo-labs/alineo"

// Span attribute keys.
const (
	attrSandboxID   = attribute.Key("alineo.sandbox.id")
	attrName        = attribute.Key("alineo.sandbox.name")
	attrRunID       = attribute.Key("alineo.run.id")
	attrOp          = attribute.Key("alineo.sandbox.op")
	attrSeq         = attribute.Key("alineo.exec.seq")
	attrCmd         = attribute.Key("alineo.exec.cmd")
	attrKind        = attribute.Key("alineo.exec.kind")
	attrReplayed    = attribute.Key("alineo.exec.replayed")
	attrInteractive = attribute.Key("alineo.exec.interactive")
	attrStdout      = attribute.Key("alineo.exec.stdout_bytes")
	attrStderr      = attribute.Key("alineo.exec.stderr_bytes")
	attrExitCode    = attribute.Key("process.exit_code")
	attrSnapshotID  = attribute.Key("alineo.snapshot.id")
	attrCheckpoint  = attribute.Key("alineo.checkpoint.name")
	attrEnv         = attribute.Key("alineo.environment.name")
	attrEvent       = attribute.Key("alineo.event.name")
)

func tracerOf(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return tp.Tracer(instrumentation)
}

// span starts a span of the sandbox's operation name under its sandbox.run
// span, linked to the caller's span when ctx has another one.
func (s *Sandbox) span(ctx context.Context, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	all := make([]attribute.KeyValue, 0, 1+len(attrs))
	all = append(append(all, attrSandboxID.String(s.id)), attrs...)
	opts := make([]trace.SpanStartOption, 1, 2)
	opts[0] = trace.WithAttributes(all...)
	parent := ctx
	if s.run != nil {
		if caller := trace.SpanContextFromContext(ctx); caller.IsValid() && caller.SpanID() != s.run.SpanContext().SpanID() {
			opts = append(opts, trace.WithLinks(trace.Link{SpanContext: caller}))
		}
		parent = trace.ContextWithSpan(ctx, s.run)
	}
	return s.c.tracer.Start(parent, name, opts...)
}

// execSpan starts the sandbox.exec span of e.
func (s *Sandbox) execSpan(ctx context.Context, e *Exec) (context.Context, trace.Span) {
	return s.span(ctx, "sandbox.exec", attrSeq.Int(e.step), attrCmd.String(e.text), attrKind.String(string(e.kind)))
}

// endExec ends e's span once e has ended, with its exit code, byte counts and
// error (a *CommandError included: a non-zero exit is an error status, as in
// the TypeScript SDK).
func (e *Exec) endSpan(span trace.Span, replayed bool) {
	err := e.out.result()
	stdout, stderr := e.out.bytes()
	e.finishSpan(span, replayed, err, stdout, stderr)
}

// endSpanOnFinish arms e's output to end span (as endSpan does, live) as the
// exec's end is recorded, before any reader sees it: Wait returns with the
// span ended, and the spans of a handle's execs end in the order the execs
// do (under load, a goroutine ending it after Wait let a later exec's span
// end first).
func (e *Exec) endSpanOnFinish(span trace.Span) {
	e.out.onDone = func(err error, stdout, stderr int64) { e.finishSpan(span, false, err, stdout, stderr) }
}

func (e *Exec) finishSpan(span trace.Span, replayed bool, err error, stdout, stderr int64) {
	if !span.IsRecording() { // the no-op provider's: nothing to set
		span.End()
		return
	}
	span.SetAttributes(attrReplayed.Bool(replayed), attrExitCode.Int(e.exitCode),
		attrStdout.Int64(stdout), attrStderr.Int64(stderr))
	if err == nil && e.exitCode != 0 {
		err = &CommandError{ExitCode: e.exitCode, Command: e.text, SandboxID: e.sb.id}
	}
	spans.End(span, err)
}

// endRun ends the sandbox.run span of a handle that is closed (err: Close's).
func (s *Sandbox) endRun(err error) {
	if s.run != nil {
		spans.End(s.run, err)
	}
}

// traceParent returns the W3C traceparent of ctx's span, "" when it has none.
func traceParent(ctx context.Context) string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return ""
	}
	return "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-" + sc.TraceFlags().String()
}
