package alineo

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/opensandbox"
)

// CodeContextOptions configure one CreateCodeContext.
type CodeContextOptions struct {
	// Cwd is the interpreter's working directory; empty for execd's default.
	Cwd string
}

// CodeContext is a stateful code interpreter in the sandbox (execd's
// /code/context): one long-lived python or node process whose variables,
// imports and definitions carry over from one Run to the next. It dies with
// its sandbox. Safe for concurrent use; runs in one context take turns.
//
// Each Run is an ExecCode: numbered, recorded (exec.started with the code,
// its output, its value and exception, exec.completed) and replayed on
// Client.Resume like any exec.
// The context itself is not recorded: a resumed handle creates a new, empty
// one, and replayed runs do not execute, so state that later live runs need
// must be rebuilt by a live run.
type CodeContext struct {
	sb       *Sandbox
	id       string
	language string
}

// CreateCodeContext starts a code interpreter for language ("python" or
// "javascript"; sandboxd also takes "python3", "node" and "js") and returns
// it. Errors: *OptionError for an empty language; a *SandboxError wrapping
// the server's *APIError when execd refuses (an unknown language, no such
// interpreter in the image, a missing Cwd); ErrClosed, ErrPaused.
func (s *Sandbox) CreateCodeContext(ctx context.Context, language string, opts ...CodeContextOptions) (*CodeContext, error) {
	o, err := oneOption("CodeContextOptions", opts)
	if err != nil {
		return nil, err
	}
	if strings.TrimSpace(language) == "" {
		return nil, &OptionError{Field: "language", Reason: "is empty"}
	}
	ex, err := s.fileExecd(ctx)
	if err != nil {
		return nil, err
	}
	cc, err := ex.CreateCodeContext(ctx, language, o.Cwd)
	if err != nil {
		return nil, codeContextError(s, "create code context", err)
	}
	lang := cc.Language
	if lang == "" {
		lang = language
	}
	return &CodeContext{sb: s, id: cc.ID, language: lang}, nil
}

// ID returns the context's id on execd.
func (c *CodeContext) ID() string { return c.id }

// Language returns the context's language as execd named it.
func (c *CodeContext) Language() string { return c.language }

// Run runs code in the context and returns its handle: Sandbox.ExecCode with
// the context. Output keeps its bytes (newlines included). The value of the
// code's last expression, if it has one, is ExecResult.Value (Python's repr:
// "42", "'ab'"). An exception is exit code 1 (Python's sys.exit(n) is n): its
// name, value and traceback are ExecResult.Exception, its traceback is also
// at the end of stderr, and when strict the exec's error is a *CommandError
// whose Exception it is (errors.As finds the *Exception too). The value and
// the exception are recorded as exec.output rows of type "result" and
// "error" (execd's events, as the TypeScript SDK records them), so a resumed
// handle replays them with the output. opts.Language and opts.ContextID, if
// set, must be the context's.
func (c *CodeContext) Run(ctx context.Context, code string, opts ...CodeOptions) *Exec {
	var o CodeOptions
	if len(opts) > 0 {
		o = opts[0]
	}
	if (o.ContextID != "" && o.ContextID != c.id) || (o.Language != "" && o.Language != c.language) {
		text := c.sb.redactText(code)
		return c.sb.start(ctx, execCall{text: text, strict: o.strict(),
			bad:     &OptionError{Field: "CodeOptions", Reason: fmt.Sprintf("names context %q (%s), not this context %q (%s)", o.ContextID, o.Language, c.id, c.language)},
			started: events.ExecStartedPayload{Kind: events.KindCode, Code: text, Fingerprint: events.Fingerprint(events.KindCode, text)}})
	}
	o.ContextID, o.Language = c.id, c.language
	if len(opts) > 1 {
		return c.sb.ExecCode(ctx, code, append([]CodeOptions{o}, opts[1:]...)...) // ExecCode refuses them
	}
	return c.sb.ExecCode(ctx, code, o)
}

// Interrupt interrupts the code running in the context (SIGINT to the
// interpreter: Python's KeyboardInterrupt); the context survives.
func (c *CodeContext) Interrupt(ctx context.Context) error {
	ex, err := c.sb.fileExecd(ctx)
	if err != nil {
		return err
	}
	if err := ex.InterruptCode(ctx, c.id); err != nil {
		return codeContextError(c.sb, "interrupt code context "+c.id, err)
	}
	return nil
}

// Close deletes the context: its interpreter ends. Closing a context that is
// gone (deleted, or its sandbox closed) returns an error matching
// opensandbox.ErrNotFound; after Sandbox.Close, ErrClosed.
func (c *CodeContext) Close(ctx context.Context) error {
	ex, err := c.sb.fileExecd(ctx)
	if err != nil {
		return err
	}
	if err := ex.DeleteCodeContext(ctx, c.id); err != nil {
		return codeContextError(c.sb, "delete code context "+c.id, err)
	}
	return nil
}

// CodeContexts lists the sandbox's code contexts, of one language when
// language is not empty.
func (s *Sandbox) CodeContexts(ctx context.Context, language string) ([]*CodeContext, error) {
	ex, err := s.fileExecd(ctx)
	if err != nil {
		return nil, err
	}
	list, err := ex.ListCodeContexts(ctx, language)
	if err != nil {
		return nil, codeContextError(s, "list code contexts", err)
	}
	out := make([]*CodeContext, 0, len(list))
	for _, cc := range list {
		out = append(out, &CodeContext{sb: s, id: cc.ID, language: cc.Language})
	}
	return out, nil
}

// codeContextError wraps a failed execd call: execd's answer or a bad request
// as a *SandboxError, a transport failure as an *ExecConnectionError.
func codeContextError(s *Sandbox, op string, err error) error {
	var apiErr *opensandbox.APIError
	if errors.As(err, &apiErr) || errors.Is(err, opensandbox.ErrInvalidRequest) {
		return &SandboxError{SandboxID: s.id, Op: op, Err: err}
	}
	return &ExecConnectionError{SandboxID: s.id, Err: fmt.Errorf("%s: %w", op, err)}
}
