package api

import (
	"net/http/httptest"
	"testing"

	"github.com/alineo-labs/alineo/events"
)

// TestTypeScriptNames: the stream filter takes the TypeScript SDK's names (the
// bus carries the dotted ones), and the dashboard renders its entries as ours.
func TestTypeScriptNames(t *testing.T) {
	r := httptest.NewRequest("GET", "/v1/events/stream?event=exec_complete,exec.started", nil)
	flt, e := streamFilter(r)
	if e != nil || len(flt.Events) != 2 || flt.Events[0] != events.ExecCompleted || flt.Events[1] != events.ExecStarted {
		t.Fatalf("filter = %+v, %+v; want exec.completed and exec.started", flt.Events, e)
	}
	tests := []struct {
		e    events.Entry
		want string
	}{
		{events.Entry{Event: events.TSExecStart, Payload: []byte(`{"cmd":"ls /tmp","seq":7}`)}, "ls /tmp"},
		{events.Entry{Event: events.TSExecEvent, Payload: []byte(`{"seq":7,"type":"stdout","text":"count","timestamp":1}`)}, "stdout: count"},
		{events.Entry{Event: events.TSExecComplete, Payload: []byte(`{"exitCode":3,"seq":5}`)}, `{"seq":5,"exitCode":3}`},
		{events.Entry{Event: events.TSExecStart, Payload: []byte(`"{\"cmd\":\"ls\",\"seq\":1}"`)}, "ls"}, // a JSONB string
	}
	for _, tt := range tests {
		if got := summary(tt.e); got != tt.want {
			t.Errorf("summary(%s %s) = %q, want %q", tt.e.Event, tt.e.Payload, got, tt.want)
		}
	}
}
