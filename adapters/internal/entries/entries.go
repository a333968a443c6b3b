package entries

import (
	"fmt"
	"slices"

	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/events"
)

// ValidateProjected checks a batch for adapters.ProjectionStore.ApplyBatch: a consumer name,
// and entries that are valid and carry their ledger sequence. Its errors wrap an
// *events.ValidationError (and so events.ErrInvalidEntry); an entry's error names its index.
func ValidateProjected(consumer string, es []events.Entry) error {
	if consumer == "" {
		return &events.ValidationError{Field: "consumer", Reason: "is empty"}
	}
	for i, e := range es {
		if e.Seq == 0 {
			return fmt.Errorf("entry %d: %w", i, &events.ValidationError{Field: "seq", Reason: "must be > 0 for a projected entry"})
		}
		if err := events.Validate(e); err != nil {
			return fmt.Errorf("entry %d: %w", i, err)
		}
	}
	return nil
}

// CheckProjectedSeqs is ValidateProjected for entries that already passed
// events.Validate (validated.Entries): it checks the consumer name and that
// every entry carries its ledger sequence.
func CheckProjectedSeqs(consumer string, es []events.Entry) error {
	if consumer == "" {
		return &events.ValidationError{Field: "consumer", Reason: "is empty"}
	}
	for i, e := range es {
		if e.Seq == 0 {
			return fmt.Errorf("entry %d: %w", i, &events.ValidationError{Field: "seq", Reason: "must be > 0 for a projected entry"})
		}
	}
	return nil
}

// Checkpoints returns the checkpoints of sandbox.checkpoint_created entries es, in order. A
// payload that does not decode is an error naming the entry's Seq.
func Checkpoints(es []events.Entry) ([]adapters.CheckpointInfo, error) {
	out := make([]adapters.CheckpointInfo, 0, len(es))
	for _, e := range es {
		var p events.CheckpointCreatedPayload
		if err := e.Decode(&p); err != nil {
			return nil, fmt.Errorf("entry %d: %w", e.Seq, err)
		}
		out = append(out, adapters.CheckpointInfo{SnapshotID: p.SnapshotID, Tag: p.Name, CreatedAt: e.Ts})
	}
	return out, nil
}

// Encode returns es as the vocabulary v stores them (events.Vocabulary.Encode):
// es itself for events.Dotted, else a new slice whose entries have no
// PrevHash or Hash: a chain hash covers the entry as written, which another
// vocabulary changes (a projection into a store of the TypeScript vocabulary
// keeps no chain; an append is chained by the store after Encode).
func Encode(v events.Vocabulary, es []events.Entry) ([]events.Entry, error) {
	if v == events.Dotted {
		return es, nil
	}
	out := make([]events.Entry, len(es))
	for i, e := range es {
		var err error
		if out[i], err = v.Encode(e); err != nil {
			return nil, fmt.Errorf("entry %d: %w", i, err)
		}
		out[i].PrevHash, out[i].Hash = "", ""
	}
	return out, nil
}

// Heads returns, for each session of es with chained entries, its last
// chained entry, in the order of first appearance.
func Heads(es []events.Entry) []events.Entry {
	var out []events.Entry
	for _, e := range es {
		if e.Hash == "" {
			continue
		}
		i := slices.IndexFunc(out, func(h events.Entry) bool { return h.Name == e.Name && h.SandboxID == e.SandboxID })
		if i < 0 {
			out = append(out, e)
		} else {
			out[i] = e
		}
	}
	return out
}
