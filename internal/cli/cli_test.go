package cli

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestHealthz: /healthz is 200 while every check passes, 503 naming the
// first failure otherwise.
func TestHealthz(t *testing.T) {
	var down error
	h := MetricsHandler(NewRegistry(), func() error { return nil }, func() error { return down })
	get := func() (int, string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
		return rec.Code, rec.Body.String()
	}
	if code, body := get(); code != http.StatusOK || !strings.Contains(body, `"ok"`) {
		t.Errorf("healthy: %d %q", code, body)
	}
	down = errors.New("NATS connection RECONNECTING")
	if code, body := get(); code != http.StatusServiceUnavailable || !strings.Contains(body, "RECONNECTING") {
		t.Errorf("unhealthy: %d %q, want 503 naming the failure", code, body)
	}
}
