package summary

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/alineo-labs/alineo/adapters"
)

func TestQuery(t *testing.T) {
	name := "job"
	tests := []struct {
		name     string
		sname    *string
		opts     adapters.ListOptions
		want     string
		wantArgs []any
	}{
		{"all", nil, adapters.ListOptions{},
			` WHERE started_at IS NOT NULL ORDER BY started_at DESC, name, sandbox_id`, nil},
		{"every filter", &name, adapters.ListOptions{Status: adapters.StatusRunning, Before: 7, RunID: "r", SandboxID: "sb", Limit: 3},
			` WHERE started_at IS NOT NULL AND name = $1 AND status = $2 AND started_at < $3 AND run_id = $4 AND sandbox_id = $5` +
				` ORDER BY started_at DESC, name, sandbox_id LIMIT $6`,
			[]any{"job", "running", int64(7), "r", "sb", int64(3)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var args []any
			got := Query(tt.sname, tt.opts, func(v any) string {
				args = append(args, v)
				return fmt.Sprintf("$%d", len(args))
			})
			if got != tt.want {
				t.Errorf("Query = %q, want %q", got, tt.want)
			}
			if !reflect.DeepEqual(args, tt.wantArgs) {
				t.Errorf("args = %#v, want %#v", args, tt.wantArgs)
			}
		})
	}
}
