package sandboxd_test

import (
	"context"
	"errors"
	"io/fs"
	"path/filepath"
	"testing"

	"github.com/alineo-labs/alineo/sandboxd"
)

// An image error names ErrImage and keeps its cause for errors.Is.
func TestImportImageKeepsCause(t *testing.T) {
	err := sandboxd.ImportImage(context.Background(), t.TempDir(), "x", filepath.Join(t.TempDir(), "missing.tar"))
	if !errors.Is(err, sandboxd.ErrImage) || !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("ImportImage(missing) = %v, want ErrImage wrapping fs.ErrNotExist", err)
	}
}
