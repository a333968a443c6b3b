package checkpoints_test

import (
	"errors"
	"testing"

	"github.com/alineo-labs/alineo/checkpoints"
)

func TestInputValidate(t *testing.T) {
	cp := func(parent string) *checkpoints.Checkpoint {
		return &checkpoints.Checkpoint{ID: "c2", ThreadID: "t", ParentID: parent, Reason: checkpoints.ReasonAutomatic}
	}
	tests := []struct {
		name string
		err  error
		want error // nil for success
	}{
		{"append ok", checkpoints.AppendInput{Checkpoint: cp("c1"), ExpectedHead: "c1"}.Validate(), nil},
		{"append first", checkpoints.AppendInput{Checkpoint: cp("")}.Validate(), nil},
		{"append nil", checkpoints.AppendInput{}.Validate(), checkpoints.ErrInvalidEntry},
		{"append bad checkpoint", checkpoints.AppendInput{Checkpoint: &checkpoints.Checkpoint{ThreadID: "t"}}.Validate(), checkpoints.ErrInvalidID},
		{"append bad head", checkpoints.AppendInput{Checkpoint: cp(""), ExpectedHead: "a/b"}.Validate(), checkpoints.ErrInvalidID},
		{"append parent mismatch", checkpoints.AppendInput{Checkpoint: cp("c0"), ExpectedHead: "c1"}.Validate(), checkpoints.ErrParentMismatch},
		{"delete ok", checkpoints.DeleteHeadInput{ThreadID: "t", CheckpointID: "c"}.Validate(), nil},
		{"delete no thread", checkpoints.DeleteHeadInput{CheckpointID: "c"}.Validate(), checkpoints.ErrInvalidID},
		{"delete no checkpoint", checkpoints.DeleteHeadInput{ThreadID: "t"}.Validate(), checkpoints.ErrInvalidID},
		{"fork ok", checkpoints.ForkInput{SourceThreadID: "a", SourceCheckpointID: "b", DestinationThreadID: "c", DestinationCheckpointID: "d"}.Validate(), nil},
		{"fork no destination", checkpoints.ForkInput{SourceThreadID: "a", SourceCheckpointID: "b", DestinationThreadID: "c"}.Validate(), checkpoints.ErrInvalidID},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.want == nil {
				if tt.err != nil {
					t.Fatalf("Validate = %v, want nil", tt.err)
				}
				return
			}
			if !errors.Is(tt.err, tt.want) {
				t.Fatalf("Validate = %v, want %v", tt.err, tt.want)
			}
		})
	}
}
