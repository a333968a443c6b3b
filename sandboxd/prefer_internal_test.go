package sandboxd

import (
	"net/http/httptest"
	"testing"
	"time"
)

func TestPreferences(t *testing.T) {
	tests := []struct {
		headers        []string
		representation bool
		wait           time.Duration
	}{
		{nil, false, 0},
		{[]string{"return=representation"}, true, 0},
		{[]string{"return=minimal, wait=3"}, false, 3 * time.Second},
		{[]string{`RETURN = "representation" ; foo=bar`}, true, 0},
		{[]string{"respond-async", "wait=7, return=representation"}, true, 7 * time.Second},
		{[]string{"wait=2, wait=9"}, false, 2 * time.Second}, // the first counts
		{[]string{"wait=999999"}, false, maxPreferredWait},
		{[]string{"wait=1.5"}, false, 0},
		{[]string{"wait="}, false, 0},
		{[]string{"waiting=4"}, false, 0},
		{[]string{"return"}, false, 0},
	}
	for _, tt := range tests {
		r := httptest.NewRequest("POST", "/sandboxes/x/pause", nil)
		for _, h := range tt.headers {
			r.Header.Add("Prefer", h)
		}
		if got := prefersRepresentation(r); got != tt.representation {
			t.Errorf("%q: representation = %v, want %v", tt.headers, got, tt.representation)
		}
		if got := preferredWait(r); got != tt.wait {
			t.Errorf("%q: wait = %v, want %v", tt.headers, got, tt.wait)
		}
	}
}
