package sandboxd

import (
	"net/http"

	"github.com/alineo-labs/alineo/sandboxd/execd"
	"github.com/alineo-labs/alineo/sandboxd/internal/runtime"
)

// execdFactory builds the execd handler a sandbox serves, inside the sandbox.
// A variable so that a test can swap it before the init hook runs.
var execdFactory runtime.ExecdFactory = func(cfg runtime.ExecdConfig) (http.Handler, func() error, error) {
	srv, err := execd.New(execd.Config{Token: cfg.Token, Root: cfg.Root, Env: cfg.Env, Logger: cfg.Logger, OOMScoreAdj: cfg.OOMScoreAdj,
		Cwd: cfg.Cwd, UID: cfg.UID, GID: cfg.GID, CommandDone: cfg.CommandDone})
	if err != nil {
		return nil, nil, err
	}
	return srv, srv.Close, nil
}

// init makes this binary a sandbox init, or one of the init's other roles,
// when the runtime re-executed it so (see runtime.RunRole); else it returns.
func init() {
	runtime.RunRole(runtime.Roles{Execd: execdFactory, IdleEntrypoint: defaultSnapshotEntrypoint})
}
