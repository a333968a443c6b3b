package validated

import (
	"context"
	"fmt"

	"github.com/alineo-labs/alineo/events"
)

// Entries are ledger entries each of which passed events.Validate. The zero
// value holds none.
type Entries struct{ es []events.Entry }

// Check validates es and returns them as Entries. The error names the index
// of the first invalid entry and wraps its *events.ValidationError (and so
// events.ErrInvalidEntry).
func Check(es []events.Entry) (Entries, error) {
	for i, e := range es {
		if err := events.Validate(e); err != nil {
			if len(es) == 1 {
				return Entries{}, err
			}
			return Entries{}, fmt.Errorf("entry %d: %w", i, err)
		}
	}
	return Entries{es}, nil
}

// Trust returns es as Entries without validating them: the caller guarantees
// that each one passed events.Validate (the projector's decoder, the SDK's
// ledger writer).
func Trust(es []events.Entry) Entries { return Entries{es} }

// Slice returns the entries. The caller must not modify them.
func (v Entries) Slice() []events.Entry { return v.es }

// Len returns the number of entries.
func (v Entries) Len() int { return len(v.es) }

// Appender is a ledger that appends validated entries without validating
// them again. AppendValidated has the semantics of the ledger's Append for
// one entry and of its AppendBatch (all or nothing) for several; the
// ledger's other checks (a closed store, ctx, its own limits) still apply.
type Appender interface {
	AppendValidated(ctx context.Context, v Entries) error
	// ValidatedSelf returns the receiver itself; see AppenderOf.
	ValidatedSelf() any
}

// Applier is a projection store that applies validated entries without
// validating their contents again: ApplyBatch of adapters.ProjectionStore,
// still checking the consumer name and each entry's Seq.
type Applier interface {
	ApplyValidated(ctx context.Context, consumer string, v Entries, offset uint64) error
	// ValidatedSelf returns the receiver itself; see ApplierOf.
	ValidatedSelf() any
}

// AppenderOf returns l as an Appender when l itself provides
// AppendValidated, and nil otherwise. A type that embeds a store of this
// module (to wrap its Append, say) inherits AppendValidated, but not the
// identity ValidatedSelf returns: it is refused, so that its own Append is
// the one called.
func AppenderOf(l any) Appender {
	if a, ok := l.(Appender); ok && a.ValidatedSelf() == l {
		return a
	}
	return nil
}

// ApplierOf is AppenderOf for Applier: s when s itself provides
// ApplyValidated, else nil.
func ApplierOf(s any) Applier {
	if a, ok := s.(Applier); ok && a.ValidatedSelf() == s {
		return a
	}
	return nil
}
