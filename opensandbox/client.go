package opensandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"
)

// Well-known ports and headers.
const (
	ExecdPort  = 44772 // execd inside every sandbox
	EgressPort = 18080 // egress sidecar

	HeaderAPIKey      = "OPEN-SANDBOX-API-KEY"
	HeaderExecdToken  = "X-EXECD-ACCESS-TOKEN"
	HeaderEgressToken = "OPENSANDBOX-EGRESS-AUTH"
	HeaderRequestID   = "X-Request-ID"
	// HeaderExactOutput asks execd for output chunks of exact bytes, and in a
	// stream's response says they are (sandboxd's extension; see ExactOutput).
	HeaderExactOutput = "X-Alineo-Exact-Output"
)

// userAgent is sent unless Config.Headers sets one.
const userAgent = "alineo-opensandbox-go/1"

// DefaultBaseURL is used when Config.BaseURL is empty.
const DefaultBaseURL = "http://localhost:8080/v1"

// Config configures a Client. The zero value is valid: it talks to DefaultBaseURL
// without an API key.
type Config struct {
	// BaseURL of the lifecycle API, e.g. "http://localhost:8080/v1". A URL without a
	// path gets "/v1" appended; any other path is used as is.
	BaseURL string
	// APIKey is sent as OPEN-SANDBOX-API-KEY on lifecycle calls; empty sends none.
	APIKey string
	// Headers are added to every lifecycle request.
	Headers map[string]string
	// HTTPClient is the client used for all calls (lifecycle, execd, egress). Its
	// Timeout is ignored (a copy with Timeout 0 is used) so that it cannot cut
	// command streams; use RequestTimeout and contexts instead. Default: a shared
	// clone of http.DefaultTransport keeping up to 64 idle connections per host.
	HTTPClient *http.Client
	// UseServerProxy routes execd and egress traffic through the lifecycle server:
	// {BaseURL}/sandboxes/{id}/proxy/{port}. Needed when sandbox endpoints are not
	// reachable from the caller (server in Docker on a bridge network).
	UseServerProxy bool
	// Logger receives debug logs of retries and waits. Default: discard.
	Logger *slog.Logger
	// Retry configures retries of idempotent calls.
	Retry RetryConfig
	// RequestTimeout bounds each unary call (all attempts included) on top of its
	// context. It never applies to command streams, metric watches or download
	// bodies. Default 60 s; negative disables.
	RequestTimeout time.Duration
	// EndpointHostRewrite maps hosts in endpoints returned by the server to hosts
	// reachable from here, e.g. {"host.docker.internal": "localhost"}.
	EndpointHostRewrite map[string]string
	// ExecdReadyTimeout bounds the execd readiness wait in Client.Execd on top of its
	// context. Default 80 s; negative means only the context bounds it.
	ExecdReadyTimeout time.Duration
}

// RetryConfig configures exponential backoff (±25 % jitter) for idempotent calls
// (GET, PUT, DELETE, merge-PATCH, renew). Retried: transport errors and statuses 429,
// 502, 503, 504. A Retry-After header raises the delay. POSTs that create or start
// something are never retried.
type RetryConfig struct {
	MaxRetries      int           // retries after the first attempt; default 3, negative disables
	InitialInterval time.Duration // default 200 ms
	MaxInterval     time.Duration // default 5 s
}

func (r RetryConfig) withDefaults() RetryConfig {
	if r.MaxRetries == 0 {
		r.MaxRetries = 3
	}
	if r.MaxRetries < 0 {
		r.MaxRetries = 0
	}
	if r.InitialInterval <= 0 {
		r.InitialInterval = 200 * time.Millisecond
	}
	if r.MaxInterval <= 0 {
		r.MaxInterval = 5 * time.Second
	}
	if r.MaxInterval < r.InitialInterval {
		r.MaxInterval = r.InitialInterval
	}
	return r
}

// Client is a lifecycle API client. Safe for concurrent use. It holds no goroutines
// and needs no Close; per-sandbox Execd and Egress clients it hands out have their
// own Close.
type Client struct {
	t                 *transport
	apiKey            string
	useServerProxy    bool
	execdReadyTimeout time.Duration
	hostRewrite       map[string]string
}

// New returns a Client for cfg. It fails with ErrInvalidRequest if BaseURL is not an
// absolute http(s) URL. It does not contact the server.
func New(cfg Config) (*Client, error) {
	raw := cfg.BaseURL
	if raw == "" {
		raw = DefaultBaseURL
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("%w: base URL %q must be an absolute http(s) URL", ErrInvalidRequest, raw)
	}
	u.Path = strings.TrimRight(u.Path, "/")
	if u.Path == "" {
		u.Path = "/v1"
	}
	u.RawPath, u.RawQuery, u.Fragment = "", "", ""
	h := http.Header{}
	for k, v := range cfg.Headers {
		h.Set(k, v)
	}
	if cfg.APIKey != "" {
		h.Set(HeaderAPIKey, cfg.APIKey)
	}
	t := newTransport(u, h, transportConfig{
		HTTPClient: cfg.HTTPClient, Logger: cfg.Logger, Retry: cfg.Retry, RequestTimeout: cfg.RequestTimeout,
	})
	rt := cfg.ExecdReadyTimeout
	if rt == 0 {
		rt = 80 * time.Second
	}
	return &Client{t: t, apiKey: cfg.APIKey, useServerProxy: cfg.UseServerProxy, execdReadyTimeout: rt,
		hostRewrite: maps.Clone(cfg.EndpointHostRewrite)}, nil
}

// BaseURL returns the normalised lifecycle base URL (no trailing slash).
func (c *Client) BaseURL() string { return c.t.base.String() }

// defaultTransport is shared by clients without Config.HTTPClient: the standard
// transport but keeping more idle connections per host, since with the server proxy
// every sandbox's traffic goes to one host (http.DefaultTransport keeps 2).
var defaultTransport = sync.OnceValue(func() http.RoundTripper {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 256
	t.MaxIdleConnsPerHost = 64
	return t
})

// transportConfig is what every per-service transport shares.
type transportConfig struct {
	HTTPClient     *http.Client
	Logger         *slog.Logger
	Retry          RetryConfig
	RequestTimeout time.Duration
}

// transport sends requests to one base URL with fixed headers.
type transport struct {
	base    *url.URL
	headers http.Header
	hc      *http.Client
	log     *slog.Logger
	retry   RetryConfig
	timeout time.Duration
}

func newTransport(base *url.URL, headers http.Header, cfg transportConfig) *transport {
	hc := &http.Client{Transport: defaultTransport()}
	if cfg.HTTPClient != nil {
		cp := *cfg.HTTPClient
		cp.Timeout = 0
		hc = &cp
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	timeout := cfg.RequestTimeout
	if timeout == 0 {
		timeout = 60 * time.Second
	}
	return &transport{base: base, headers: headers, hc: hc, log: log, retry: cfg.Retry.withDefaults(), timeout: timeout}
}

// request describes one call.
type request struct {
	method string
	path   string // appended to base; segments must already be escaped
	query  url.Values
	header http.Header
	// json is marshalled as the body when non-nil.
	json any
	// body, when non-nil, is the (non-retryable) streaming body with contentType.
	body        io.Reader
	contentType string
	idempotent  bool
	accept      string
}

func (t *transport) url(path string, q url.Values) string {
	u := *t.base
	unescaped, err := url.PathUnescape(path)
	if err != nil {
		unescaped = path
	}
	u.Path = t.base.Path + unescaped
	u.RawPath = t.base.EscapedPath() + path
	if len(q) > 0 {
		u.RawQuery = q.Encode()
	}
	return u.String()
}

// send performs r with retries and returns a 2xx response whose body the caller must
// close. Non-2xx responses are turned into *APIError.
func (t *transport) send(ctx context.Context, r request) (*http.Response, error) {
	var payload []byte
	if r.json != nil {
		b, err := json.Marshal(r.json)
		if err != nil {
			return nil, fmt.Errorf("%w: encode %s %s body: %w", ErrInvalidRequest, r.method, r.path, err)
		}
		payload = b
	}
	target := t.url(r.path, r.query)
	retries := 0
	if r.idempotent && r.body == nil {
		retries = t.retry.MaxRetries
	}
	bo := backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(t.retry.InitialInterval),
		backoff.WithMaxInterval(t.retry.MaxInterval),
		backoff.WithMultiplier(2),
		backoff.WithRandomizationFactor(0.25),
		backoff.WithMaxElapsedTime(0),
	)
	for attempt := 0; ; attempt++ {
		var body io.Reader
		switch {
		case payload != nil:
			body = bytes.NewReader(payload)
		case r.body != nil:
			body = r.body
		}
		req, err := http.NewRequestWithContext(ctx, r.method, target, body)
		if err != nil {
			return nil, fmt.Errorf("%w: %s %s: %w", ErrInvalidRequest, r.method, r.path, err)
		}
		for k, vs := range t.headers {
			req.Header[k] = vs
		}
		for k, vs := range r.header {
			req.Header[k] = vs
		}
		switch {
		case payload != nil:
			req.Header.Set("Content-Type", "application/json")
		case r.body != nil && r.contentType != "":
			req.Header.Set("Content-Type", r.contentType)
		}
		if req.Header.Get("User-Agent") == "" {
			req.Header.Set("User-Agent", userAgent)
		}
		accept := r.accept
		if accept == "" {
			accept = "application/json"
		}
		req.Header.Set("Accept", accept)

		resp, err := t.hc.Do(req)
		var retryAfter time.Duration
		if err == nil {
			if resp.StatusCode < 300 {
				return resp, nil
			}
			apiErr := readAPIError(resp)
			err = apiErr
			if !retryableStatus(resp.StatusCode) {
				return nil, err
			}
			retryAfter = apiErr.RetryAfter
		} else if ctx.Err() != nil {
			return nil, fmt.Errorf("%s %s: %w", r.method, r.path, ctx.Err())
		} else {
			err = fmt.Errorf("%s %s: %w", r.method, r.path, err)
		}
		if attempt >= retries {
			return nil, err
		}
		delay := max(bo.NextBackOff(), retryAfter)
		t.log.DebugContext(ctx, "opensandbox: retrying", "method", r.method, "path", r.path,
			"attempt", attempt+1, "delay", delay, "err", err)
		timer := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil, fmt.Errorf("%s %s: %w (last error: %w)", r.method, r.path, ctx.Err(), err)
		case <-timer.C:
		}
	}
}

func retryableStatus(s int) bool {
	switch s {
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// do performs a unary call bounded by the request timeout and decodes a JSON
// response into out (if non-nil and the body is not empty).
func (t *transport) do(ctx context.Context, r request, out any) error {
	if t.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, t.timeout)
		defer cancel()
	}
	resp, err := t.send(ctx, r)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil || resp.StatusCode == http.StatusNoContent {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
		return nil
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("%s %s: read response: %w", r.method, r.path, err)
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("%s %s: decode response: %w (body %q)", r.method, r.path, err, truncate(b, 256))
	}
	return nil
}

const maxErrorBody = 4 << 10

func readAPIError(resp *http.Response) *APIError {
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	e := &APIError{
		Status:     resp.StatusCode,
		RequestID:  resp.Header.Get(HeaderRequestID),
		Method:     resp.Request.Method,
		RetryAfter: parseRetryAfter(resp.Header.Get("Retry-After")),
	}
	u := *resp.Request.URL
	u.RawQuery = ""
	e.URL = u.String()
	var body struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	if json.Unmarshal(b, &body) == nil && body.Code != "" {
		e.Code, e.Message = body.Code, body.Message
		return e
	}
	e.Code = http.StatusText(resp.StatusCode)
	e.Message = strings.TrimSpace(string(b))
	return e
}

func parseRetryAfter(v string) time.Duration {
	if v == "" {
		return 0
	}
	if s, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && s >= 0 {
		return min(time.Duration(s)*time.Second, 5*time.Minute)
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := time.Until(t); d > 0 {
			return min(d, 5*time.Minute)
		}
	}
	return 0
}

func truncate(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "..."
	}
	return string(b)
}

// pathEscape escapes one path segment.
func pathEscape(s string) string { return url.PathEscape(s) }
