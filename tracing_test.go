package alineo

import (
	"context"
	"testing"

	"github.com/alineo-labs/alineo/adapters/memory"
	"github.com/alineo-labs/alineo/events"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// spansByName indexes ended spans; a name that ended twice keeps its last.
func spansByName(spans tracetest.SpanStubs) map[string]tracetest.SpanStub {
	m := map[string]tracetest.SpanStub{}
	for _, s := range spans {
		m[s.Name] = s
	}
	return m
}

func attr(s tracetest.SpanStub, key attribute.Key) attribute.Value {
	for _, kv := range s.Attributes {
		if kv.Key == key {
			return kv.Value
		}
	}
	return attribute.Value{}
}

func TestFakeTraces(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	f := newFakeServer(t)
	store := memory.New()
	c, err := New(Options{BaseURL: f.URL, Adapter: store, TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	ctx, caller := tp.Tracer("test").Start(context.Background(), "caller")
	sb, err := c.Sandbox(ctx, SandboxOptions{Image: "ubuntu", RunID: "run-1"})
	if err != nil {
		t.Fatal(err)
	}
	// Each exec's span is ended by the time Wait returns (found by the race
	// stress: ended after it, in the exec's goroutine, a later exec's span
	// could end first).
	ended := func(n int) {
		t.Helper()
		got := 0
		for _, s := range exp.GetSpans() {
			if s.Name == "sandbox.exec" {
				got++
			}
		}
		if got != n {
			t.Fatalf("%d sandbox.exec spans ended once Wait returned, want %d", got, n)
		}
	}
	if _, err := sb.Exec(ctx, "echo hi").Wait(); err != nil {
		t.Fatal(err)
	}
	ended(1)
	if _, err := sb.Exec(ctx, "fail 3", ExecOptions{Strict: new(false)}).Wait(); err != nil {
		t.Fatal(err)
	}
	ended(2)
	if err := sb.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	if err := sb.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	if err := sb.Close(ctx); err != nil {
		t.Fatal(err)
	}
	caller.End()

	spans := exp.GetSpans()
	by := spansByName(spans)
	run, ok := by["sandbox.run"]
	if !ok {
		t.Fatalf("no sandbox.run span in %d spans", len(spans))
	}
	if run.Parent.SpanID() != caller.SpanContext().SpanID() {
		t.Errorf("sandbox.run's parent = %s, want the caller's span", run.Parent.SpanID())
	}
	if got := attr(run, attrSandboxID).AsString(); got != sb.ID() {
		t.Errorf("sandbox.run alineo.sandbox.id = %q, want %q", got, sb.ID())
	}
	var execs []tracetest.SpanStub
	for _, s := range spans {
		if s.Name == "sandbox.exec" {
			execs = append(execs, s)
		}
	}
	if len(execs) != 2 {
		t.Fatalf("%d sandbox.exec spans, want 2", len(execs))
	}
	for i, want := range []struct {
		cmd    string
		exit   int64
		stdout int64
		status codes.Code
	}{{"echo hi", 0, 3, codes.Ok}, {"fail 3", 3, 0, codes.Error}} {
		s := execs[i]
		if s.Parent.SpanID() != run.SpanContext.SpanID() {
			t.Errorf("exec %d: parent is not sandbox.run", i+1)
		}
		if len(s.Links) != 1 || s.Links[0].SpanContext.SpanID() != caller.SpanContext().SpanID() {
			t.Errorf("exec %d: links = %v, want one to the caller's span", i+1, s.Links)
		}
		if attr(s, attrCmd).AsString() != want.cmd || attr(s, attrExitCode).AsInt64() != want.exit ||
			attr(s, attrSeq).AsInt64() != int64(i+1) || attr(s, attrStdout).AsInt64() != want.stdout ||
			attr(s, attrReplayed).AsBool() || s.Status.Code != want.status {
			t.Errorf("exec %d span = %v status %v; want cmd %q exit %d stdout %d bytes, live, %v",
				i+1, s.Attributes, s.Status, want.cmd, want.exit, want.stdout, want.status)
		}
	}
	for _, name := range []string{"sandbox.pause", "sandbox.resume"} {
		if s, ok := by[name]; !ok || s.Parent.SpanID() != run.SpanContext.SpanID() {
			t.Errorf("%s: missing or not under sandbox.run", name)
		}
	}

	// Every ledger entry carries the trace context it was written under: an
	// exec's rows their exec span's, the sandbox's rows sandbox.run's.
	es, err := store.ReadAll(context.Background(), sb.Name(), sb.ID())
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range es {
		want := run.SpanContext
		switch {
		case e.StepIndex >= 1:
			want = execs[e.StepIndex-1].SpanContext
		case e.Event == events.SandboxPaused:
			want = by["sandbox.pause"].SpanContext
		case e.Event == events.SandboxResumed:
			want = by["sandbox.resume"].SpanContext
		}
		if wantTP := "00-" + want.TraceID().String() + "-" + want.SpanID().String() + "-01"; e.Trace != wantTP {
			t.Errorf("%s step %d: Trace = %q, want %q", e.Event, e.StepIndex, e.Trace, wantTP)
		}
	}
	if es[0].Event != events.SandboxCreated {
		t.Fatalf("first entry %s", es[0].Event)
	}
}

func TestTracesOffByDefault(t *testing.T) {
	f := newFakeServer(t)
	store := memory.New()
	c := newFakeClient(t, f, &failingStore{Store: store})
	ctx := context.Background()
	sb, err := c.Sandbox(ctx, SandboxOptions{Image: "ubuntu"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Exec(ctx, "echo hi").Wait(); err != nil {
		t.Fatal(err)
	}
	sb.Close(ctx)
	es, _ := store.ReadAll(ctx, sb.Name(), sb.ID())
	for _, e := range es {
		if e.Trace != "" {
			t.Fatalf("%s: Trace = %q with no tracer provider installed", e.Event, e.Trace)
		}
	}
}
