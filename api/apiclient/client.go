package apiclient

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/api/wire"
	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/jobs"
)

// Client is a client of the API (cmd/alineo is one). Its zero value is not
// usable: New fills it in. Safe for concurrent use. Every call returns an
// *Error for an error answer of the server, so errors.As finds its Status
// and Code.
type Client struct {
	base  *url.URL
	token string
	http  *http.Client
	// retry is the wait before Stream reconnects.
	retry time.Duration
}

// New returns a client of the API at baseURL (e.g. "http://127.0.0.1:8090")
// sending token as its bearer token ("" for none). hc nil means
// http.DefaultClient. It does no I/O. A baseURL that is not http(s)://host
// is an error wrapping ErrInvalidURL.
func New(baseURL, token string, hc *http.Client) (*Client, error) {
	u, err := url.Parse(strings.TrimRight(baseURL, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("%w %q: want http(s)://host[:port]", ErrInvalidURL, baseURL)
	}
	if hc == nil {
		hc = http.DefaultClient
	}
	return &Client{base: u, token: token, http: hc, retry: time.Second}, nil
}

// SandboxQuery filters Client.Sandboxes; the zero value lists the newest
// sessions, as many as the server's default page holds (api.DefaultPageSize).
type SandboxQuery struct {
	Name      string
	Status    adapters.SandboxStatus
	RunID     string
	SandboxID string
	Limit     int
	Before    int64
}

// Sandboxes lists sessions (GET /v1/sandboxes), newest first.
func (c *Client) Sandboxes(ctx context.Context, q SandboxQuery) (wire.SandboxList, error) {
	v := url.Values{}
	set := func(k, val string) {
		if val != "" {
			v.Set(k, val)
		}
	}
	set("name", q.Name)
	set("status", string(q.Status))
	set("runId", q.RunID)
	set("sandboxId", q.SandboxID)
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	if q.Before > 0 {
		v.Set("before", strconv.FormatInt(q.Before, 10))
	}
	var out wire.SandboxList
	err := c.do(ctx, "GET", "/v1/sandboxes", v, nil, &out)
	return out, err
}

// Sandbox returns one session's details (GET /v1/sandboxes/{name}/{id}).
func (c *Client) Sandbox(ctx context.Context, name, id string) (adapters.SandboxDetails, error) {
	var out adapters.SandboxDetails
	err := c.do(ctx, "GET", "/v1/sandboxes/"+url.PathEscape(name)+"/"+url.PathEscape(id), nil, nil, &out)
	return out, err
}

// Events returns one page of a session's events after ledger sequence after
// (GET /v1/sandboxes/{name}/{id}/events); limit 0 is the server's default.
func (c *Client) Events(ctx context.Context, name, id string, after uint64, limit int) (wire.EventPage, error) {
	v := url.Values{}
	if after > 0 {
		v.Set("after", strconv.FormatUint(after, 10))
	}
	if limit > 0 {
		v.Set("limit", strconv.Itoa(limit))
	}
	var out wire.EventPage
	err := c.do(ctx, "GET", "/v1/sandboxes/"+url.PathEscape(name)+"/"+url.PathEscape(id)+"/events", v, nil, &out)
	return out, err
}

// Jobs lists jobs, the most recently submitted first (GET /v1/jobs).
func (c *Client) Jobs(ctx context.Context, limit int) ([]jobs.Status, error) {
	v := url.Values{}
	if limit > 0 {
		v.Set("limit", strconv.Itoa(limit))
	}
	var out wire.JobList
	err := c.do(ctx, "GET", "/v1/jobs", v, nil, &out)
	return out.Jobs, err
}

// Job returns a job's status (GET /v1/jobs/{id}).
func (c *Client) Job(ctx context.Context, id string) (jobs.Status, error) {
	var out jobs.Status
	err := c.do(ctx, "GET", "/v1/jobs/"+url.PathEscape(id), nil, nil, &out)
	return out, err
}

// SubmitJob submits a job spec (JSON, as jobs.Parse reads it) and returns its
// queued status (POST /v1/jobs). A bad spec is an *Error with Code
// CodeInvalidSpec and the offending path in Field.
func (c *Client) SubmitJob(ctx context.Context, spec []byte) (jobs.Status, error) {
	var out jobs.Status
	err := c.do(ctx, "POST", "/v1/jobs", nil, spec, &out)
	return out, err
}

// CancelJob cancels a job (POST /v1/jobs/{id}/cancel) and returns its
// status: canceled when it had not started, else running with
// CancelRequested (its worker stops it before its next step). A job already
// settled is an *Error with Code CodeConflict.
func (c *Client) CancelJob(ctx context.Context, id string) (jobs.Status, error) {
	var out jobs.Status
	err := c.do(ctx, "POST", "/v1/jobs/"+url.PathEscape(id)+"/cancel", nil, []byte("{}"), &out)
	return out, err
}

// RetryJob submits a failed or canceled job's spec again as a new job (POST
// /v1/jobs/{id}/retry) and returns the new job's status (RetryOf names id). A
// job that cannot be retried is an *Error with Code CodeConflict.
func (c *Client) RetryJob(ctx context.Context, id string) (jobs.Status, error) {
	var out jobs.Status
	err := c.do(ctx, "POST", "/v1/jobs/"+url.PathEscape(id)+"/retry", nil, []byte("{}"), &out)
	return out, err
}

// Executors lists the workers of the jobs queue with their state, jobs and
// last heartbeat (GET /v1/executors).
func (c *Client) Executors(ctx context.Context) (wire.ExecutorList, error) {
	var out wire.ExecutorList
	err := c.do(ctx, "GET", "/v1/executors", nil, nil, &out)
	return out, err
}

// StreamQuery selects the events of Client.Stream.
type StreamQuery struct {
	SandboxID string         // "" for every sandbox
	Events    []events.Event // nil for every event
	// After resumes after this ledger sequence (as Last-Event-ID); 0 starts
	// with the next new event, unless From is set.
	After uint64
	// From starts at this ledger sequence (1 for the whole history) when
	// After is 0.
	From uint64
}

// Stream follows the live event stream (GET /v1/events/stream), calling f
// with each entry in order until ctx is done (it then returns nil) or f
// returns an error (returned as is). When the connection drops or the
// server ends the stream, it reconnects and resumes with Last-Event-ID
// after the last entry it delivered, so nothing is lost or repeated. An
// error answer other than 503 (a bad filter, a wrong token) ends it with
// that *Error.
func (c *Client) Stream(ctx context.Context, q StreamQuery, f func(events.Entry) error) error {
	last := q.After
	for {
		err := c.streamOnce(ctx, q, last, func(e events.Entry) error {
			if err := f(e); err != nil {
				return &callbackError{err}
			}
			last = e.Seq
			return nil
		})
		var cbe *callbackError
		var ae *Error
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.As(err, &cbe):
			return cbe.err
		case errors.As(err, &ae) && ae.Status != http.StatusServiceUnavailable:
			return err
		}
		select { // dropped: reconnect
		case <-ctx.Done():
			return nil
		case <-time.After(c.retry):
		}
	}
}

type callbackError struct{ err error }

func (e *callbackError) Error() string { return e.err.Error() }

// streamOnce reads one connection of the stream; it returns when the
// connection ends (nil or the read error), or with f's error.
func (c *Client) streamOnce(ctx context.Context, q StreamQuery, last uint64, f func(events.Entry) error) error {
	v := url.Values{}
	if q.SandboxID != "" {
		v.Set("sandbox", q.SandboxID)
	}
	for _, ev := range q.Events {
		v.Add("event", string(ev))
	}
	if last == 0 && q.From > 0 {
		v.Set("from", strconv.FormatUint(q.From, 10))
	}
	req, err := c.request(ctx, "GET", "/v1/events/stream", v, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "text/event-stream")
	if last > 0 {
		req.Header.Set("Last-Event-ID", strconv.FormatUint(last, 10))
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return decodeError(resp)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	var data, event string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if event == "" && data != "" {
				var e events.Entry
				if err := json.Unmarshal([]byte(data), &e); err != nil {
					return fmt.Errorf("decode stream event: %w", err)
				}
				if err := f(e); err != nil {
					return err
				}
			}
			data, event = "", ""
		case strings.HasPrefix(line, "data:"):
			data = strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " ")
		case strings.HasPrefix(line, "event:"):
			event = strings.TrimSpace(strings.TrimPrefix(line, "event:"))
		}
	}
	return sc.Err()
}

func (c *Client) request(ctx context.Context, method, path string, q url.Values, body []byte) (*http.Request, error) {
	u := *c.base
	u.Path = strings.TrimRight(u.Path, "/") + path
	u.RawQuery = q.Encode()
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), r)
	if err != nil {
		return nil, err
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return req, nil
}

func (c *Client) do(ctx context.Context, method, path string, q url.Values, body []byte, out any) error {
	req, err := c.request(ctx, method, path, q, body)
	if err != nil {
		return err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return decodeError(resp)
	}
	if out == nil {
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("%s %s: decode answer: %w", method, path, err)
	}
	return nil
}

// decodeError reads an error answer into an *Error.
func decodeError(resp *http.Response) error {
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	e := &Error{Status: resp.StatusCode}
	if json.Unmarshal(data, e) != nil || e.Code == "" {
		e.Code, e.Message = http.StatusText(resp.StatusCode), strings.TrimSpace(string(data))
	}
	return e
}
