package entries

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/events"
)

func entry(seq uint64) events.Entry {
	return events.Entry{Seq: seq, Ts: 1, Name: "n", SandboxID: "s", StepIndex: -1, Event: events.SandboxClosed}
}

func TestValidateProjected(t *testing.T) {
	tests := []struct {
		name     string
		consumer string
		es       []events.Entry
		wantErr  string
	}{
		{"ok", "c", []events.Entry{entry(1), entry(2)}, ""},
		{"empty batch", "c", nil, ""},
		{"no consumer", "", []events.Entry{entry(1)}, "consumer"},
		{"no seq", "c", []events.Entry{entry(1), entry(0)}, "entry 1: "},
		{"invalid entry", "c", []events.Entry{{Seq: 3}}, "entry 0: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidateProjected(tt.consumer, tt.es)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("ValidateProjected = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, events.ErrInvalidEntry) {
				t.Fatalf("ValidateProjected = %v, want an error wrapping ErrInvalidEntry", err)
			}
			if got := err.Error(); !strings.Contains(got, tt.wantErr) {
				t.Fatalf("error = %q, want it to mention %q", got, tt.wantErr)
			}
		})
	}
}

func TestCheckpoints(t *testing.T) {
	cp := func(seq uint64, ts int64, payload string) events.Entry {
		return events.Entry{Seq: seq, Ts: ts, Name: "n", SandboxID: "s", StepIndex: -1,
			Event: events.CheckpointCreated, Payload: json.RawMessage(payload)}
	}
	got, err := Checkpoints([]events.Entry{cp(1, 10, `{"snapshotId":"a"}`), cp(2, 20, `{"snapshotId":"b","name":"t"}`)})
	if err != nil {
		t.Fatal(err)
	}
	want := []adapters.CheckpointInfo{{SnapshotID: "a", CreatedAt: 10}, {SnapshotID: "b", Tag: "t", CreatedAt: 20}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Checkpoints = %+v, want %+v", got, want)
	}
	if got, err := Checkpoints(nil); err != nil || len(got) != 0 || got == nil {
		t.Fatalf("Checkpoints(nil) = %#v, %v, want an empty non-nil slice", got, err)
	}
	if _, err := Checkpoints([]events.Entry{cp(7, 1, `[1]`)}); err == nil || !strings.Contains(err.Error(), "entry 7: ") {
		t.Fatalf("Checkpoints(bad payload) error = %v, want one naming entry 7", err)
	}
}
