package jobs_test

import (
	"context"
	"testing"

	alineo "github.com/alineo-labs/alineo"
	"github.com/alineo-labs/alineo/adapters/memory"
	"github.com/alineo-labs/alineo/jobs"
	"github.com/alineo-labs/alineo/testenv"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

func attrOf(s tracetest.SpanStub, key string) attribute.Value {
	for _, kv := range s.Attributes {
		if string(kv.Key) == key {
			return kv.Value
		}
	}
	return attribute.Value{}
}

// A job's spans: job.run, a job.step per step, and the SDK's sandbox.run
// inside job.run with each step's sandbox.exec linked to its job.step.
func TestRunTraces(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	client, err := alineo.New(alineo.Options{BaseURL: testenv.Sandboxd(t), Adapter: memory.New(), TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	spec := mustParse(t, `{"name":"traced","image":"host","steps":[
		{"exec":{"command":"echo one"}},{"exec":{"command":"exit 3","strict":false}}]}`)
	r := &jobs.Runner{Client: client, TracerProvider: tp}
	if _, err := r.Run(context.Background(), spec, nil); err != nil {
		t.Fatal(err)
	}
	var run tracetest.SpanStub
	var steps, execs []tracetest.SpanStub
	var sandboxRun tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		switch s.Name {
		case "job.run":
			run = s
		case "job.step":
			steps = append(steps, s)
		case "sandbox.exec":
			execs = append(execs, s)
		case "sandbox.run":
			sandboxRun = s
		}
	}
	if !run.SpanContext.IsValid() || len(steps) != 2 || len(execs) != 2 {
		t.Fatalf("spans: job.run %v, %d job.step, %d sandbox.exec; want 1, 2, 2", run.SpanContext.IsValid(), len(steps), len(execs))
	}
	if sandboxRun.Parent.SpanID() != run.SpanContext.SpanID() {
		t.Errorf("sandbox.run is not inside job.run")
	}
	for i, st := range steps {
		if st.Parent.SpanID() != run.SpanContext.SpanID() || attrOf(st, "alineo.job.step").AsInt64() != int64(i) ||
			attrOf(st, "alineo.job.step_state").AsString() != "done" {
			t.Errorf("job.step %d = %v under %s", i, st.Attributes, st.Parent.SpanID())
		}
		if l := execs[i].Links; len(l) != 1 || l[0].SpanContext.SpanID() != st.SpanContext.SpanID() {
			t.Errorf("sandbox.exec %d is not linked to its job.step", i+1)
		}
	}
	if got := attrOf(steps[1], "process.exit_code").AsInt64(); got != 3 {
		t.Errorf("step 2 exit code attribute = %d, want 3", got)
	}
}
