package alineo

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/redact"
)

// credState is a handle's credentials as it knows them: every value it bound
// (current and replaced or removed ones, which stay redacted) and the binding
// in force by name. The zero value is ready to use.
type credState struct {
	red atomic.Pointer[redact.Redactor] // nil: nothing to redact

	mu sync.Mutex
	// values maps a redaction name to its value: a credential's name to its
	// current value, "<name>#<n>" to a value it no longer has ('#' is not
	// allowed in credential names, so the two never meet).
	values   map[string]string
	bindings map[string]boundState
	retired  int // numbers the names of values no longer current
}

type boundState struct {
	binding CredentialBinding
	source  CredentialSource
}

// addValue makes value the current value of name and rebuilds the redactor.
// A replaced value stays redacted, as "[REDACTED:<name>#<n>]".
func (c *credState) addValue(name, value string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.values == nil {
		c.values = map[string]string{}
	}
	if old, ok := c.values[name]; ok && old != value {
		c.retired++
		c.values[name+"#"+strconv.Itoa(c.retired)] = old
	}
	c.values[name] = value
	c.red.Store(redact.New(c.values))
}

// bound returns the credentials with a binding in force, with their current
// values, ordered by name.
func (c *credState) bound() []resumedCredential {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]resumedCredential, 0, len(c.bindings))
	for name, b := range c.bindings {
		out = append(out, resumedCredential{name: name, value: c.values[name], binding: b.binding, source: b.source})
	}
	slices.SortFunc(out, func(a, b resumedCredential) int { return strings.Compare(a.name, b.name) })
	return out
}

func (c *credState) setBinding(name string, b CredentialBinding, source CredentialSource) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.bindings == nil {
		c.bindings = map[string]boundState{}
	}
	if source == "" {
		source = c.bindings[name].source
	}
	c.bindings[name] = boundState{binding: b, source: source}
}

func (c *credState) binding(name string) (CredentialBinding, CredentialSource, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	b, ok := c.bindings[name]
	return b.binding, b.source, ok
}

func (c *credState) dropBinding(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.bindings, name)
}

// redactor returns the redactor of every value bound so far (nil for none).
func (c *credState) redactor() *redact.Redactor { return c.red.Load() }

// redactText returns text with every bound value replaced. Command lines and
// code are recorded, fingerprinted and reported redacted, so a resumed handle
// (which re-registers the same values) computes the same fingerprints.
func (s *Sandbox) redactText(text string) string { return s.creds.redactor().String(text) }

// outputRedaction redacts an exec's stdout and stderr, each as one stream, so
// a value split across chunks is still replaced. A nil *outputRedaction passes
// output through. Used by the exec's recorder goroutine only.
type outputRedaction struct {
	stdout, stderr *redact.Stream
}

// newOutputRedaction returns the redaction of an exec starting now, nil when
// no value is bound.
func (s *Sandbox) newOutputRedaction() *outputRedaction {
	r := s.creds.redactor()
	if r.Empty() {
		return nil
	}
	return &outputRedaction{stdout: r.NewStream(), stderr: r.NewStream()}
}

// write returns what of data (the next bytes of stream s) can be recorded now,
// redacted; the rest is held back until more output or flush.
func (o *outputRedaction) write(s events.Stream, data []byte) []byte {
	if o == nil {
		return data
	}
	if s == events.Stderr {
		return o.stderr.Write(data)
	}
	return o.stdout.Write(data)
}

// flush returns the held-back rest of each stream, redacted, as chunks.
func (o *outputRedaction) flush() []chunk {
	if o == nil {
		return nil
	}
	var out []chunk
	if b := o.stdout.Flush(); len(b) > 0 {
		out = append(out, chunk{stream: events.Stdout, data: b})
	}
	if b := o.stderr.Flush(); len(b) > 0 {
		out = append(out, chunk{stream: events.Stderr, data: b})
	}
	return out
}

// flushRedacted queues the output the redaction held back at the end of the
// stream, like record queues a group.
func (r *recorder) flushRedacted(ctx context.Context) error {
	e := r.e
	for _, c := range e.red.flush() {
		select {
		case r.inFlight <- struct{}{}:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		done, err := e.sb.ledger.emitChained(ctx, e.chain, events.ExecOutput, e.step, outputPayload(e.step, c.stream, c.data))
		if err != nil {
			<-r.inFlight
			return err
		}
		r.enqueue(ctx, pendingChunk{c: c, done: done})
	}
	return nil
}
