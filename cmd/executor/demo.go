package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
)

func demo(ctx context.Context, c *config, getenv func(string) string, stdout io.Writer, log *slog.Logger) error {
	return errors.New("demo: not yet")
}
