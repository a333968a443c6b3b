package alineo

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"

	"github.com/alineo-labs/alineo/opensandbox"
)

// ConnectOptions configure Client.Connect.
type ConnectOptions struct {
	// Resources are the sandbox's limits. The server does not report them, so
	// without them the handle cannot Fork (ErrForkUnsupported).
	Resources Resources
	// RunID is the handle's run id, inherited by its forks; default a new UUID.
	RunID string
	// Shell is the handle's shell, as SandboxOptions.Shell.
	Shell string
}

// Connect attaches to a sandbox that is already Running, for instance one
// created by another process. It writes nothing on connect (there is no
// sandbox.created); later events go to the session (name, sandboxID), name
// defaulting to "sandbox-<first 8 of the id>", with step indexes from 1. The
// handle holds a concurrency slot and Close deletes the sandbox, as for
// Client.Sandbox.
//
// Errors: *ClientError 404 when the sandbox is unknown, 409 when it is not
// Running; *ExecConnectionError when its execd does not answer.
func (c *Client) Connect(ctx context.Context, sandboxID, name string, opts ConnectOptions) (*Sandbox, error) {
	if sandboxID == "" {
		return nil, &OptionError{Field: "sandboxID", Reason: "is empty"}
	}
	info, err := c.os.GetSandbox(ctx, sandboxID)
	switch {
	case errors.Is(err, opensandbox.ErrNotFound):
		return nil, &ClientError{Status: http.StatusNotFound, SandboxID: sandboxID, Message: "sandbox not found", Err: err}
	case err != nil:
		return nil, &SandboxError{SandboxID: sandboxID, Op: "connect", Err: err}
	case info.Status.State != opensandbox.StateRunning:
		return nil, &ClientError{Status: http.StatusConflict, SandboxID: sandboxID,
			Message: "sandbox is " + string(info.Status.State) + ", not Running"}
	}
	if err := checkActorOf(ctx); err != nil {
		return nil, err
	}
	if err := c.sem.acquire(ctx); err != nil {
		return nil, fmt.Errorf("alineo: wait for a sandbox slot: %w", err)
	}
	ex, err := c.os.Execd(ctx, sandboxID)
	if err != nil {
		c.sem.release()
		return nil, &ExecConnectionError{SandboxID: sandboxID, Err: err}
	}
	runID := opts.RunID
	if runID == "" {
		runID = newUUID()
	}
	var res Resources
	if opts.Resources != (Resources{}) {
		res = opts.Resources.withDefaults()
	}
	name = defaultName(name, "sandbox-")(sandboxID)
	sb := c.handle(c.actorFor(ctx, ""), sandboxID, name, runID, res, opts.Shell, ex)
	sb.release = sync.OnceFunc(c.sem.release)
	return sb, nil
}
