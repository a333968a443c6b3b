package spans

import (
	"context"
	"errors"
	"testing"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

func TestEnd(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tr := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp)).Tracer("t")
	_, ok := tr.Start(context.Background(), "ok")
	End(ok, nil)
	_, bad := tr.Start(context.Background(), "bad")
	End(bad, errors.New("boom"))
	got := exp.GetSpans()
	if len(got) != 2 {
		t.Fatalf("%d spans ended, want 2", len(got))
	}
	if got[0].Status.Code != codes.Ok || len(got[0].Events) != 0 {
		t.Errorf("ok span: status %v, events %v", got[0].Status, got[0].Events)
	}
	if got[1].Status.Code != codes.Error || got[1].Status.Description != "boom" || len(got[1].Events) != 1 {
		t.Errorf("failed span: status %v, events %v; want error boom and the error recorded", got[1].Status, got[1].Events)
	}
}
