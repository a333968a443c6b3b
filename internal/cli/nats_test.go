package cli

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"flag"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// pki writes a CA, a server certificate for 127.0.0.1 and a client
// certificate, all signed by the CA, under dir.
func pki(t *testing.T, dir string) (ca, srvCert, srvKey, cliCert, cliKey string) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	leaf := func(name string, serial int64, usage x509.ExtKeyUsage) (string, string) {
		k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
			IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kb, _ := x509.MarshalECPrivateKey(k)
		return write(name+".pem", "CERTIFICATE", der), write(name+"-key.pem", "EC PRIVATE KEY", kb)
	}
	ca = write("ca.pem", "CERTIFICATE", caDER)
	srvCert, srvKey = leaf("server", 2, x509.ExtKeyUsageServerAuth)
	cliCert, cliKey = leaf("client", 3, x509.ExtKeyUsageClientAuth)
	return
}

// TestOpenBusCredentialsAndTLS: against a nats-server that requires TLS with
// a client certificate and a user and password, the binaries' NATS flags
// connect, and each missing piece is refused.
func TestOpenBusCredentialsAndTLS(t *testing.T) {
	dir := t.TempDir()
	ca, srvCert, srvKey, cliCert, cliKey := pki(t, dir)
	tc, err := server.GenTLSConfig(&server.TLSConfigOpts{CertFile: srvCert, KeyFile: srvKey, CaFile: ca, Verify: true})
	if err != nil {
		t.Fatal(err)
	}
	tc.MinVersion = tls.VersionTLS12
	opts := &server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true, StoreDir: t.TempDir(),
		NoLog: true, NoSigs: true, TLS: true, TLSVerify: true, TLSConfig: tc, TLSTimeout: 2,
		Username: "fleet", Password: "s3cret"}
	srv, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	defer srv.Shutdown()
	url := srv.ClientURL()
	env := map[string]string{"NATS_PASSWORD": "s3cret"}
	getenv := func(k string) string { return env[k] }
	open := func(args ...string) error {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		n := NATSFlags(fs, getenv)
		if err := fs.Parse(args); err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		b, err := OpenBus(ctx, url, "", n, nil)
		if err == nil {
			b.Close()
		}
		return err
	}
	full := []string{"--nats-user", "fleet", "--nats-ca", ca, "--nats-cert", cliCert, "--nats-key", cliKey}
	if err := open(full...); err != nil {
		t.Fatalf("with credentials and TLS: %v", err)
	}
	for name, args := range map[string][]string{
		"no client certificate": {"--nats-user", "fleet", "--nats-ca", ca},
		"no user":               {"--nats-ca", ca, "--nats-cert", cliCert, "--nats-key", cliKey},
		"no CA":                 {"--nats-user", "fleet", "--nats-cert", cliCert, "--nats-key", cliKey},
		"cert without key":      {"--nats-user", "fleet", "--nats-ca", ca, "--nats-cert", cliCert},
		"two credentials":       append([]string{"--nats-creds", filepath.Join(dir, "x.creds")}, full...),
		"bad replicas":          append([]string{"--nats-replicas", "7"}, full...),
	} {
		if err := open(args...); err == nil {
			t.Errorf("%s: connected, want an error", name)
		}
	}
	env["NATS_PASSWORD"] = "wrong"
	if err := open(full...); err == nil {
		t.Error("a wrong password connected")
	}
}
