package sandboxinit

import (
	"fmt"
	"net/http"
	"os"

	"github.com/alineo-labs/alineo/sandboxd/execd"
	"github.com/alineo-labs/alineo/sandboxd/internal/runtime"
)

// IdleEntrypoint returns the entrypoint a sandbox created from a snapshot
// gets by default, the protocol's `tail -f /dev/null`: in an image without
// tail, the init runs its own idle role instead.
func IdleEntrypoint() []string { return []string{"tail", "-f", "/dev/null"} }

// RunRole plays the role ALINEO_SANDBOXD_INIT names, then exits the process;
// without the variable it returns at once.
func RunRole() {
	runtime.RunRole(runtime.Roles{Execd: newExecd, IdleEntrypoint: IdleEntrypoint()})
}

// Main is the sandbox init's program: it plays its role, and fails, saying
// so, when run without one (sandboxd starts it, not a user).
func Main() {
	RunRole()
	fmt.Fprintf(os.Stderr, "%s is the sandbox init: sandboxd runs it in every sandbox; it has nothing to do on its own\n", runtime.InitName)
	os.Exit(2)
}

// newExecd builds the execd handler a sandbox serves, inside the sandbox.
func newExecd(cfg runtime.ExecdConfig) (http.Handler, func() error, error) {
	srv, err := execd.New(execd.Config{Token: cfg.Token, Root: cfg.Root, Env: cfg.Env, Logger: cfg.Logger, OOMScoreAdj: cfg.OOMScoreAdj,
		Cwd: cfg.Cwd, UID: cfg.UID, GID: cfg.GID, CommandDone: cfg.CommandDone})
	if err != nil {
		return nil, nil, err
	}
	return srv, srv.Close, nil
}
