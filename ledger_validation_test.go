package alineo

import (
	"context"
	"errors"
	"testing"

	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/adapters/memory"
	"github.com/alineo-labs/alineo/adapters/sqlite"
	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/testenv"
)

// TestValidationAtTheFront checks both fronts of a store: the SDK's ledger
// writer validates and hands valid entries over without a second check, and
// the store's own Append, AppendBatch and ApplyBatch still refuse an invalid
// entry from outside the SDK with ErrInvalidEntry, writing nothing.
func TestValidationAtTheFront(t *testing.T) {
	stores := map[string]func(t *testing.T) adapters.Store{
		"memory": func(*testing.T) adapters.Store { return memory.New() },
		"sqlite": func(t *testing.T) adapters.Store {
			s, err := sqlite.Open(testenv.SQLitePath(t), sqlite.Config{})
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
	}
	for name, open := range stores {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			s := open(t)
			t.Cleanup(func() { s.Close() })
			if validatedAppender(s) == nil {
				t.Fatalf("%T does not take validated entries from the SDK", s)
			}
			// Through the SDK's writer: the valid entry is written, the
			// invalid one (an unknown event) fails alone.
			l := newLedger(s, "front", "sb-1")
			if err := l.write(ctx, events.SandboxCreated, events.SandboxLevel, events.SandboxCreatedPayload{SandboxID: "sb-1"}); err != nil {
				t.Fatalf("SDK write: %v", err)
			}
			if err := l.write(ctx, "exec_finished", 1, nil); !errors.Is(err, adapters.ErrInvalidEntry) {
				t.Fatalf("SDK write of an unknown event = %v, want ErrInvalidEntry", err)
			}
			// From outside the SDK: refused by the store itself.
			bad := events.Entry{Ts: 1, Name: "front", SandboxID: "sb-1", StepIndex: 1, Event: events.ExecOutput, Payload: []byte(`{"seq":`)}
			if err := s.Append(ctx, bad); !errors.Is(err, adapters.ErrInvalidEntry) {
				t.Fatalf("Append from outside = %v, want ErrInvalidEntry", err)
			}
			if err := s.AppendBatch(ctx, []events.Entry{bad}); !errors.Is(err, adapters.ErrInvalidEntry) {
				t.Fatalf("AppendBatch from outside = %v, want ErrInvalidEntry", err)
			}
			bad.Seq = 7
			if err := s.(adapters.ProjectionStore).ApplyBatch(ctx, "c", []events.Entry{bad}, 7); !errors.Is(err, adapters.ErrInvalidEntry) {
				t.Fatalf("ApplyBatch from outside = %v, want ErrInvalidEntry", err)
			}
			es, err := s.ReadAll(ctx, "front", "sb-1")
			if err != nil || len(es) != 1 || es[0].Event != events.SandboxCreated {
				t.Fatalf("ReadAll = %+v, %v; want only the SDK's sandbox.created", es, err)
			}
		})
	}
}

func validatedAppender(s adapters.Ledger) any {
	if l := newLedger(s, "n", "id"); l.trusted != nil {
		return l.trusted
	}
	return nil
}
