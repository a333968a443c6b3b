package projections

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/events"
)

// Verify compares two projections row for row through the Store read
// methods: every session's details, then every entry of each session
// (including its ledger sequence). It returns nil when they are equal and a
// *MismatchError (wrapping ErrMismatch) naming the first difference.
func Verify(ctx context.Context, a, b adapters.Store) error {
	da, err := a.ListAllSandboxDetails(ctx, adapters.ListOptions{})
	if err != nil {
		return fmt.Errorf("verify: list a: %w", err)
	}
	db, err := b.ListAllSandboxDetails(ctx, adapters.ListOptions{})
	if err != nil {
		return fmt.Errorf("verify: list b: %w", err)
	}
	byKey := func(x, y adapters.SandboxDetails) int {
		return cmp.Or(cmp.Compare(x.Name, y.Name), cmp.Compare(x.SandboxID, y.SandboxID))
	}
	slices.SortFunc(da, byKey)
	slices.SortFunc(db, byKey)
	for i := range max(len(da), len(db)) {
		if i >= len(da) || i >= len(db) {
			var only adapters.SandboxDetails
			side := "b"
			if i < len(da) {
				only, side = da[i], "a"
			} else {
				only = db[i]
			}
			return &MismatchError{Where: "sessions", Name: only.Name, SandboxID: only.SandboxID, Index: i,
				A: fmt.Sprintf("%d sessions", len(da)), B: fmt.Sprintf("%d sessions (extra on %s)", len(db), side)}
		}
		if da[i] != db[i] {
			return &MismatchError{Where: "details", Name: da[i].Name, SandboxID: da[i].SandboxID, Index: i,
				A: fmt.Sprintf("%+v", da[i]), B: fmt.Sprintf("%+v", db[i])}
		}
	}
	for _, d := range da {
		ea, err := a.ReadAll(ctx, d.Name, d.SandboxID)
		if err != nil {
			return fmt.Errorf("verify: read a %s/%s: %w", d.Name, d.SandboxID, err)
		}
		eb, err := b.ReadAll(ctx, d.Name, d.SandboxID)
		if err != nil {
			return fmt.Errorf("verify: read b %s/%s: %w", d.Name, d.SandboxID, err)
		}
		for i := range max(len(ea), len(eb)) {
			var x, y string
			if i < len(ea) {
				x = render(ea[i])
			}
			if i < len(eb) {
				y = render(eb[i])
			}
			if x != y {
				return &MismatchError{Where: "entries", Name: d.Name, SandboxID: d.SandboxID, Index: i, A: x, B: y}
			}
		}
	}
	return nil
}

// render is an entry's canonical text: payload JSON re-encoded so that
// formatting differences between stores (JSONB) do not count.
func render(e events.Entry) string {
	if len(e.Payload) > 0 {
		var v any
		if json.Unmarshal(e.Payload, &v) == nil {
			e.Payload, _ = json.Marshal(v)
		}
	}
	b, _ := json.Marshal(e)
	return string(b)
}
