package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/alineo-labs/alineo/internal/testutil"
)

// TestLinksNoServer: the sandbox init's program is the roles and execd
// alone. What it would link of the server (its blob drivers, gRPC, the cloud
// SDKs, the checkpoint stores) runs its init functions at every start, twice
// in every sandbox's start: the reason this program exists.
func TestLinksNoServer(t *testing.T) {
	// Packages matched exactly, and prefixes of module paths.
	exact := []string{
		"github.com/alineo-labs/alineo/sandboxd", // the server, not its subpackages
		"github.com/alineo-labs/alineo/sandboxd/snapshots",
		"github.com/alineo-labs/alineo/checkpoints",
	}
	prefixes := []string{"gocloud.dev/", "google.golang.org/grpc", "github.com/aws/", "cloud.google.com/", "github.com/Azure/", "modernc.org/sqlite", "github.com/jackc/"}
	var found []string
	for _, dep := range testutil.LinkedPackages(t) {
		if slices.Contains(exact, dep) || slices.ContainsFunc(prefixes, func(p string) bool { return strings.HasPrefix(dep, p) }) {
			found = append(found, dep)
		}
	}
	if len(found) > 0 {
		t.Errorf("cmd/sandboxd-init links %d packages it must not (%s)", len(found), strings.Join(found, ", "))
	}
}
