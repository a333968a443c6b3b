package projections

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// maxApplyLinks bounds the links of one projection.apply span: a batch of
// thousands of entries written under as many spans links to the first ones.
const maxApplyLinks = 128

// applySpan starts the projection.apply span of batch b, linked to each
// distinct span that wrote its entries (events.Entry.Trace, from the
// messages' traceparent headers).
func (r *Runtime) applySpan(ctx context.Context, b *batch) (context.Context, trace.Span) {
	tp := r.TracerProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	var links []trace.Link
	seen := map[string]bool{}
	for i := range b.es {
		t := b.es[i].Trace
		if t == "" || seen[t] || len(links) == maxApplyLinks {
			continue
		}
		seen[t] = true
		sc := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(),
			propagation.MapCarrier{"traceparent": t}))
		if sc.IsValid() {
			links = append(links, trace.Link{SpanContext: sc})
		}
	}
	var first uint64
	if len(b.es) > 0 {
		first = b.es[0].Seq
	}
	return tp.Tracer("github.com/alineo-labs/alineo/projections").Start(ctx, "projection.apply",
		trace.WithSpanKind(trace.SpanKindConsumer), trace.WithLinks(links...),
		trace.WithAttributes(attribute.String("alineo.projection.name", r.Name), attribute.String("alineo.projection.key", r.key),
			attribute.Int("alineo.projection.entries", len(b.es)),
			attribute.Int64("alineo.projection.first_seq", int64(first)), attribute.Int64("alineo.projection.last_seq", int64(b.lastSeq))))
}
