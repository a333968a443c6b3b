package api

import (
	"net/http/httptest"
	"net/url"
	"testing"
)

// FuzzStreamFilter: any query and Last-Event-ID either parse into a filter
// of known or extension events and a valid sandbox id, or give a 400 naming a field.
func FuzzStreamFilter(f *testing.F) {
	f.Add("sandbox=abc&event=exec.started,exec.output", "12")
	f.Add("from=5", "")
	f.Add("event=bogus", "x")
	f.Add("event=step_complete,ext.permission_requested", "")
	f.Add("event=exec.nope", "")
	f.Add("sandbox=a.b&lastEventId=-1", "")
	f.Fuzz(func(t *testing.T, query, lastID string) {
		r := httptest.NewRequest("GET", "/v1/events/stream", nil)
		r.URL.RawQuery = query
		if lastID != "" {
			r.Header.Set("Last-Event-ID", lastID)
		}
		flt, e := streamFilter(r)
		if e != nil {
			if e.Status != 400 || e.Code != CodeBadRequest || e.Message == "" {
				t.Fatalf("error = %+v, want a 400 with a message", e)
			}
			return
		}
		for _, ev := range flt.Events {
			if !ev.Valid() {
				t.Fatalf("event %q accepted: neither known nor an extension event", ev)
			}
		}
		if flt.SandboxID != url.Values(r.URL.Query()).Get("sandbox") {
			t.Fatalf("sandbox = %q", flt.SandboxID)
		}
	})
}

func FuzzListOptions(f *testing.F) {
	f.Add("status=running&limit=10&before=5")
	f.Add("limit=0")
	f.Add("limit=99999999999999999999")
	f.Fuzz(func(t *testing.T, query string) {
		r := httptest.NewRequest("GET", "/v1/sandboxes", nil)
		r.URL.RawQuery = query
		o, e := listOptions(r)
		if e != nil {
			if e.Status != 400 || e.Field == "" {
				t.Fatalf("error = %+v, want a 400 naming the field", e)
			}
			return
		}
		if o.Limit < 1 || o.Limit > MaxPageSize || o.Before < 0 {
			t.Fatalf("options out of range: %+v", o)
		}
	})
}
