package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/alineo-labs/alineo/sandboxd"
)

// noIsolationEnv, set to 1, runs the in-process sandboxd's sandboxes as
// plain host processes (development only).
const noIsolationEnv = "ALINEO_SANDBOXD_NO_ISOLATION"

// startSandboxd returns url when set; otherwise it starts sandboxd in-process
// on a loopback port and returns its URL and a function that stops it.
func startSandboxd(ctx context.Context, url string, getenv func(string) string, log *slog.Logger) (string, func(), error) {
	if url != "" {
		return url, func() {}, nil
	}
	cfg := sandboxd.Config{NoIsolation: getenv(noIsolationEnv) == "1", Logger: log}
	s, err := sandboxd.Open(ctx, cfg)
	if err != nil {
		return "", nil, fmt.Errorf("sandboxd: %w", err)
	}
	u, err := s.Start(ctx)
	if err != nil {
		_ = s.Close(context.Background())
		if errors.Is(err, sandboxd.ErrIsolationUnavailable) {
			return "", nil, fmt.Errorf("sandboxd: %w (set %s=1 to run sandboxes without isolation, development only)", err, noIsolationEnv)
		}
		return "", nil, fmt.Errorf("sandboxd: %w", err)
	}
	stop := func() {
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = s.Close(cctx)
	}
	return u, stop, nil
}
