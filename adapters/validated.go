package adapters

import "context"

type validatedKey struct{}

// WithValidatedEntries returns a context telling a ProjectionStore's
// ApplyBatch that every entry it is given under the context has already
// passed events.Validate, so the store need not parse the payloads again (it
// still checks the consumer and each Seq). The projector validates each
// message as it decodes it and marks its batches so; a caller that did not
// validate its entries must not use it. Append and AppendBatch ignore it and
// always validate.
func WithValidatedEntries(ctx context.Context) context.Context {
	return context.WithValue(ctx, validatedKey{}, true)
}

// EntriesValidated reports whether ctx was marked by WithValidatedEntries.
func EntriesValidated(ctx context.Context) bool {
	v, _ := ctx.Value(validatedKey{}).(bool)
	return v
}
