package projections_test

import (
	"context"
	"testing"
	"time"

	"github.com/alineo-labs/alineo"
	"github.com/alineo-labs/alineo/adapters/memory"
	"github.com/alineo-labs/alineo/bus"
	"github.com/alineo-labs/alineo/projections"
	"github.com/alineo-labs/alineo/testenv"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// TestTraceAcrossSDKBusProjector: an exec's span context rides on its ledger
// messages (SDK → bus), and the projector's projection.apply span that
// applies them links to that exec's sandbox.exec span.
func TestTraceAcrossSDKBusProjector(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	b := openBus(t, bus.Config{})
	l := newLedger(t, b, bus.LedgerConfig{})
	c, err := alineo.New(alineo.Options{BaseURL: testenv.Sandboxd(t), Adapter: l, TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	sb, err := c.Sandbox(ctx, alineo.SandboxOptions{Image: "host"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Exec(ctx, "echo traced").Wait(); err != nil {
		t.Fatal(err)
	}
	if err := sb.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Flush(ctx); err != nil {
		t.Fatal(err)
	}

	p := &projections.Projector{Bus: b, Store: memory.New(), TracerProvider: tp}
	run(t, p)
	caughtUp(t, b, p, 30*time.Second)

	var exec, run trace.SpanContext
	var applies []tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		switch s.Name {
		case "sandbox.exec":
			exec = s.SpanContext
		case "sandbox.run":
			run = s.SpanContext
		case "projection.apply":
			applies = append(applies, s)
		}
	}
	if !exec.IsValid() || !run.IsValid() || len(applies) == 0 {
		t.Fatalf("spans: sandbox.exec %v, sandbox.run %v, %d projection.apply; want all", exec.IsValid(), run.IsValid(), len(applies))
	}
	linked := map[trace.SpanID]bool{}
	for _, a := range applies {
		for _, l := range a.Links {
			if l.SpanContext.TraceID() == exec.TraceID() {
				linked[l.SpanContext.SpanID()] = true
			}
		}
	}
	if !linked[exec.SpanID()] {
		t.Errorf("no projection.apply span links to the exec's sandbox.exec span %s (links to %v)", exec.SpanID(), linked)
	}
	if !linked[run.SpanID()] {
		t.Errorf("no projection.apply span links to sandbox.run %s, under which sandbox.created was written", run.SpanID())
	}
}
