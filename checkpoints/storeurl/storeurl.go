package storeurl

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"

	"github.com/alineo-labs/alineo/checkpoints"
	"github.com/alineo-labs/alineo/checkpoints/postgres"
	"github.com/alineo-labs/alineo/checkpoints/sqlite"
)

// ErrInvalidURL reports a URL that names no checkpoint store.
var ErrInvalidURL = errors.New("invalid checkpoint store URL")

// Open opens the store rawURL names:
//
//   - postgres://user:password@host:5432/db?sslmode=... (or postgresql://):
//     a checkpoints/postgres store, connected and migrated;
//   - /path/to/file.db, file:///path/to/file.db or sqlite:///path/to/file.db:
//     a checkpoints/sqlite store in that file, created if needed.
//
// Errors name the URL with its password elided; a URL of no known form
// wraps ErrInvalidURL. The caller closes the store.
func Open(ctx context.Context, rawURL string, opts checkpoints.Options) (checkpoints.Store, error) {
	if rawURL == "" {
		return nil, fmt.Errorf("open checkpoint store: %w: empty", ErrInvalidURL)
	}
	if !strings.Contains(rawURL, "://") {
		return openSQLite(ctx, rawURL, opts)
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("open checkpoint store %s: %w", postgres.Redact(rawURL), ErrInvalidURL)
	}
	switch u.Scheme {
	case "postgres", "postgresql":
		s, err := postgres.Open(ctx, rawURL, opts)
		if err != nil {
			return nil, err // not a typed nil in the interface
		}
		return s, nil
	case "file", "sqlite":
		if u.Host != "" && u.Host != "localhost" || u.Path == "" {
			return nil, fmt.Errorf("open checkpoint store %s: %w: want %s:///absolute/path", u.Redacted(), ErrInvalidURL, u.Scheme)
		}
		return openSQLite(ctx, filepath.FromSlash(u.Path), opts)
	}
	return nil, fmt.Errorf("open checkpoint store %s: %w: scheme %q (want postgres://, file:// or a path)", u.Redacted(), ErrInvalidURL, u.Scheme)
}

func openSQLite(ctx context.Context, path string, opts checkpoints.Options) (checkpoints.Store, error) {
	s, err := sqlite.Open(ctx, path, opts)
	if err != nil {
		return nil, err // not a typed nil in the interface
	}
	return s, nil
}
