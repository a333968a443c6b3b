package storeurl_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/alineo-labs/alineo/checkpoints"
	"github.com/alineo-labs/alineo/checkpoints/postgres"
	"github.com/alineo-labs/alineo/checkpoints/sqlite"
	"github.com/alineo-labs/alineo/checkpoints/storeurl"
	"github.com/alineo-labs/alineo/testenv"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.StopPostgres()
	os.Exit(code)
}

func TestOpen(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	for _, tc := range []struct {
		name, url string
		sqlite    bool
	}{
		{"path", filepath.Join(dir, "a.db"), true},
		{"file", "file://" + filepath.Join(dir, "b.db"), true},
		{"sqlite", "sqlite://" + filepath.Join(dir, "c.db"), true},
		{"postgres", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := tc.url
			if u == "" {
				u = testenv.Postgres(t)
			}
			s, err := storeurl.Open(ctx, u, checkpoints.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			switch s.(type) {
			case *sqlite.Store:
				if !tc.sqlite {
					t.Fatalf("Open(%s) = a SQLite store", u)
				}
			case *postgres.Store:
				if tc.sqlite {
					t.Fatalf("Open(%s) = a Postgres store", u)
				}
			default:
				t.Fatalf("Open(%s) = %T", u, s)
			}
			l, err := s.AcquireWriter(ctx, "t")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Append(ctx, checkpoints.AppendInput{Checkpoint: &checkpoints.Checkpoint{ID: "c", ThreadID: "t", Reason: checkpoints.ReasonNamed}, Writer: l.Writer}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestOpenErrors(t *testing.T) {
	ctx := context.Background()
	for _, u := range []string{"", "redis://host/0", "file://host/x.db", "sqlite://"} {
		if _, err := storeurl.Open(ctx, u, checkpoints.Options{}); !errors.Is(err, storeurl.ErrInvalidURL) {
			t.Errorf("Open(%q) err = %v, want ErrInvalidURL", u, err)
		}
	}
	_, err := storeurl.Open(ctx, "postgres://u:hunter2@127.0.0.1:1/db?connect_timeout=2", checkpoints.Options{})
	if err == nil || strings.Contains(err.Error(), "hunter2") || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Fatalf("Open(unreachable postgres) err = %v, want the address without the password", err)
	}
}
