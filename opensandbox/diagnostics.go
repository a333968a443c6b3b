package opensandbox

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/url"
	"time"
)

// Diagnostics is a diagnostics descriptor (GET /sandboxes/{id}/diagnostics/logs or
// /events). Delivery "inline" carries Content; "url" carries ContentURL and
// ExpiresAt.
type Diagnostics struct {
	SandboxID     string     `json:"sandboxId"`
	Kind          string     `json:"kind"`  // logs | events
	Scope         string     `json:"scope"` // container | lifecycle | runtime | network | process | all
	Delivery      string     `json:"delivery"`
	ContentType   string     `json:"contentType"`
	Content       string     `json:"content,omitempty"`
	ContentURL    string     `json:"contentUrl,omitempty"`
	ExpiresAt     *time.Time `json:"expiresAt,omitempty"`
	ContentLength *int64     `json:"contentLength,omitempty"`
	Truncated     bool       `json:"truncated"`
	Warnings      []string   `json:"warnings,omitempty"`
}

// maxDiagnostics bounds an inline diagnostics body.
const maxDiagnostics = 16 << 20

// Diagnostics returns the sandbox's diagnostic logs (kind "logs") or events (kind
// "events") for scope ("" lets the server choose). Older servers answer raw text,
// which comes back as an inline descriptor. ErrNotImplemented where unsupported.
func (c *Client) Diagnostics(ctx context.Context, sandboxID, kind, scope string) (*Diagnostics, error) {
	if sandboxID == "" {
		return nil, fmt.Errorf("%w: empty sandbox id", ErrInvalidRequest)
	}
	if kind != "logs" && kind != "events" {
		return nil, fmt.Errorf("%w: diagnostics kind %q is not logs or events", ErrInvalidRequest, kind)
	}
	q := url.Values{}
	if scope != "" {
		q.Set("scope", scope)
	}
	ctx, cancel := c.t.withTimeout(ctx)
	defer cancel()
	resp, err := c.t.send(ctx, request{method: "GET", path: "/sandboxes/" + pathEscape(sandboxID) + "/diagnostics/" + kind,
		query: q, idempotent: true, accept: "application/json, text/plain"})
	if err != nil {
		return nil, fmt.Errorf("diagnostics %s of %s: %w", kind, sandboxID, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxDiagnostics+1))
	if err != nil {
		return nil, fmt.Errorf("diagnostics %s of %s: read: %w", kind, sandboxID, err)
	}
	truncated := len(b) > maxDiagnostics
	if truncated {
		b = b[:maxDiagnostics]
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != "application/json" {
		return &Diagnostics{SandboxID: sandboxID, Kind: kind, Scope: scope, Delivery: "inline",
			ContentType: resp.Header.Get("Content-Type"), Content: string(b), Truncated: truncated}, nil
	}
	var d Diagnostics
	if err := json.Unmarshal(b, &d); err != nil {
		return nil, fmt.Errorf("diagnostics %s of %s: decode: %w", kind, sandboxID, err)
	}
	return &d, nil
}

// withTimeout applies the request timeout to ctx.
func (t *transport) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if t.timeout > 0 {
		return context.WithTimeout(ctx, t.timeout)
	}
	return ctx, func() {}
}
