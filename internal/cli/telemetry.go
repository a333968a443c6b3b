package cli

import (
	"context"
	"log/slog"
	"time"

	"github.com/alineo-labs/alineo/internal/telemetry"
)

// Tracing turns on OpenTelemetry trace export from the OTEL_* variables read
// through getenv (see internal/telemetry; off when no OTLP endpoint is set).
// The returned stop flushes what is buffered, for at most five seconds, and
// logs an export failure; call it before the process exits.
func Tracing(ctx context.Context, service string, getenv func(string) string, log *slog.Logger) (stop func(), err error) {
	shutdown, err := telemetry.Setup(ctx, service, getenv)
	if err != nil {
		return nil, err
	}
	return func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := shutdown(sctx); err != nil {
			log.Warn("flush traces", "err", err)
		}
	}, nil
}
