package egress_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/alineo-labs/alineo/sandboxd/egress"
)

func testCAPEM(t *testing.T) []byte {
	t.Helper()
	p, err := egress.New(egress.Config{CredentialProxy: true, Token: "t"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	pem := p.CACertPEM()
	if !bytes.HasPrefix(pem, []byte("-----BEGIN CERTIFICATE-----")) {
		t.Fatalf("CACertPEM = %q", pem)
	}
	return pem
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestInstallCAAppends(t *testing.T) {
	pem := testCAPEM(t)
	root := t.TempDir()
	deb := filepath.Join(root, "etc/ssl/certs/ca-certificates.crt")
	write(t, deb, "EXISTING ROOTS") // no trailing newline
	for range 2 {                   // idempotent
		if err := egress.InstallCA(root, pem); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := read(t, deb), "EXISTING ROOTS\n"+string(pem); got != want {
		t.Fatalf("bundle = %q, want %q", got, want)
	}
	if _, err := os.Stat(filepath.Join(root, "etc/pki/tls/certs/ca-bundle.crt")); !os.IsNotExist(err) {
		t.Fatalf("created a bundle the image does not have: %v", err)
	}
}

func TestInstallCACreatesWhenNone(t *testing.T) {
	pem := testCAPEM(t)
	root := t.TempDir()
	if err := egress.InstallCA(root, pem); err != nil {
		t.Fatal(err)
	}
	if got := read(t, filepath.Join(root, "etc/ssl/certs/ca-certificates.crt")); got != string(pem) {
		t.Fatalf("bundle = %q, want the CA", got)
	}
}

func TestInstallCASymlinksStayInRoot(t *testing.T) {
	pem := testCAPEM(t)
	host := t.TempDir()
	hostBundle := filepath.Join(host, "host-bundle.pem")
	write(t, hostBundle, "HOST ROOTS\n")
	root := t.TempDir()
	// RHEL layout: an absolute link to the extracted bundle, inside the root.
	extracted := filepath.Join(root, "etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem")
	write(t, extracted, "IMAGE ROOTS\n")
	rhel := filepath.Join(root, "etc/pki/tls/certs/ca-bundle.crt")
	if err := os.MkdirAll(filepath.Dir(rhel), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem", rhel); err != nil {
		t.Fatal(err)
	}
	// A link that names a host path: must not be followed out of the root.
	deb := filepath.Join(root, "etc/ssl/certs/ca-certificates.crt")
	if err := os.MkdirAll(filepath.Dir(deb), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(hostBundle, deb); err != nil {
		t.Fatal(err)
	}
	if err := egress.InstallCA(root, pem); err != nil {
		t.Fatal(err)
	}
	if got, want := read(t, hostBundle), "HOST ROOTS\n"; got != want {
		t.Fatalf("host bundle changed: %q", got)
	}
	if got, want := read(t, rhel), "IMAGE ROOTS\n"+string(pem); got != want {
		t.Fatalf("rhel bundle = %q, want %q", got, want)
	}
	if got, want := read(t, extracted), "IMAGE ROOTS\n"; got != want {
		t.Fatalf("link target changed: %q (the link must be replaced, not written through)", got)
	}
	// Inside the root that link dangles: no bundle there, so it is left alone.
	if fi, err := os.Lstat(deb); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("dangling debian link was replaced: %v", err)
	}
}

func TestInstallCARejectsNonPEM(t *testing.T) {
	if err := egress.InstallCA(t.TempDir(), []byte("nope")); err == nil || !strings.Contains(err.Error(), "PEM") {
		t.Fatalf("err = %v, want a PEM error", err)
	}
}

func TestInstallCAReplacesDanglingOnlyBundle(t *testing.T) {
	pem := testCAPEM(t)
	hostBundle := filepath.Join(t.TempDir(), "host.pem")
	write(t, hostBundle, "HOST\n")
	root := t.TempDir()
	deb := filepath.Join(root, "etc/ssl/certs/ca-certificates.crt")
	if err := os.MkdirAll(filepath.Dir(deb), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(hostBundle, deb); err != nil {
		t.Fatal(err)
	}
	if err := egress.InstallCA(root, pem); err != nil {
		t.Fatal(err)
	}
	if got := read(t, hostBundle); got != "HOST\n" {
		t.Fatalf("host bundle changed: %q", got)
	}
	if fi, err := os.Lstat(deb); err != nil || !fi.Mode().IsRegular() {
		t.Fatalf("bundle is not a regular file: %v", err)
	}
	if got := read(t, deb); got != string(pem) {
		t.Fatalf("bundle = %q, want the CA", got)
	}
}
