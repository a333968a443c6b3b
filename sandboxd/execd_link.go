package sandboxd

import (
	"net/http"

	"github.com/alineo-labs/alineo/sandboxd/execd"
)

// execdFactory builds the execd handler a sandbox serves, inside the sandbox.
// A variable so that a test can swap it before the init hook runs.
var execdFactory = func(cfg execdConfig) (http.Handler, func() error, error) {
	srv, err := execd.New(execd.Config{Token: cfg.Token, Root: cfg.Root, Env: cfg.Env, Logger: cfg.Logger, OOMScoreAdj: cfg.OOMScoreAdj,
		Cwd: cfg.Cwd, UID: cfg.UID, GID: cfg.GID})
	if err != nil {
		return nil, nil, err
	}
	return srv, srv.Close, nil
}
