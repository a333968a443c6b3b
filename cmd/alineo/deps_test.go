package main

import (
	"strings"
	"testing"

	"github.com/alineo-labs/alineo/internal/testutil"
)

// TestLinksNoNATSServer: the auditor's CLI talks to the API over HTTP, so its
// binary must not carry the embedded NATS server (package api's server side
// imports bus, which imports it; the client lives in api/apiclient for this).
func TestLinksNoNATSServer(t *testing.T) {
	var server []string
	for _, dep := range testutil.LinkedPackages(t) {
		if strings.HasPrefix(dep, "github.com/nats-io/nats-server/") {
			server = append(server, dep)
		}
	}
	if len(server) > 0 {
		t.Errorf("cmd/alineo links %d packages of the NATS server (%s, ...); want none", len(server), server[0])
	}
}
