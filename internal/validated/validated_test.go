package validated

import (
	"context"
	"errors"
	"testing"

	"github.com/alineo-labs/alineo/events"
)

type store struct{ n int }

func (s *store) AppendValidated(context.Context, Entries) error { s.n++; return nil }
func (s *store) ValidatedSelf() any                             { return s }

// wrapper embeds a store to wrap its Append: it inherits AppendValidated.
type wrapper struct{ *store }

func TestAppenderOfRefusesAnEmbeddingType(t *testing.T) {
	s := &store{}
	if AppenderOf(s) == nil {
		t.Fatal("AppenderOf(store) = nil, want the store")
	}
	if a := AppenderOf(&wrapper{s}); a != nil {
		t.Fatalf("AppenderOf(wrapper) = %T, want nil: the wrapper's own Append must be called", a)
	}
	if a := AppenderOf(struct{}{}); a != nil {
		t.Fatalf("AppenderOf(struct{}{}) = %T, want nil", a)
	}
}

func TestCheck(t *testing.T) {
	ok := events.New(1, "n", "s", events.SandboxLevel, events.SandboxClosed, nil)
	v, err := Check([]events.Entry{ok, ok})
	if err != nil || v.Len() != 2 {
		t.Fatalf("Check = %d entries, %v; want 2, nil", v.Len(), err)
	}
	bad := ok
	bad.Name = ""
	if v, err := Check([]events.Entry{ok, bad}); !errors.Is(err, events.ErrInvalidEntry) || v.Len() != 0 {
		t.Fatalf("Check with an invalid entry = %d entries, %v; want none and ErrInvalidEntry", v.Len(), err)
	}
}
