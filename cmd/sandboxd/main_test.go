package main

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/internal/testutil"
	"github.com/alineo-labs/alineo/testenv"
)

// syncBuffer collects output from several goroutines.
type syncBuffer = testutil.SyncBuffer

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestRunServes(t *testing.T) {
	data := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	out := &syncBuffer{}
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--listen", "127.0.0.1:0", "--data", data, "--image", "x=" + data}, env(map[string]string{"OPEN_SANDBOX_API_KEY": "k1"}), out)
	}()
	var url string
	re := regexp.MustCompile(`listening on (http://\S+)`)
	testenv.Eventually(t, 10*time.Second, func() error {
		select {
		case err := <-done:
			t.Fatalf("run returned early: %v\n%s", err, out)
		default:
		}
		m := re.FindStringSubmatch(out.String())
		if m == nil {
			return errors.New("not listening yet")
		}
		url = m[1]
		return nil
	})
	res, err := http.Get(url + "/v1/sandboxes")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusUnauthorized {
		t.Errorf("without the API key from OPEN_SANDBOX_API_KEY: status %d, want 401", res.StatusCode)
	}
	req, _ := http.NewRequest("GET", url+"/v1/sandboxes", nil)
	req.Header.Set("OPEN-SANDBOX-API-KEY", "k1")
	res, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Errorf("with the API key: status %d, want 200", res.StatusCode)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("run did not return after cancel")
	}
	if !strings.Contains(out.String(), "host's own") {
		t.Errorf("output does not say how images resolve:\n%s", out)
	}
}

func TestRunWarnings(t *testing.T) {
	for _, tc := range []struct {
		flag string
		want []string
	}{
		{"--no-isolation", []string{"WARNING: --no-isolation", "NO ISOLATION"}},
		{"--host-network", []string{"WARNING: --host-network", "every service of this machine"}},
	} {
		t.Run(tc.flag, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			out := &syncBuffer{}
			done := make(chan error, 1)
			go func() {
				done <- run(ctx, []string{"--listen", "127.0.0.1:0", "--data", t.TempDir(), tc.flag}, env(nil), out)
			}()
			testenv.Eventually(t, 10*time.Second, func() error {
				if !strings.Contains(out.String(), "listening on") {
					return errors.New("not listening yet")
				}
				return nil
			})
			cancel()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
		})
	}
}

func TestRunBadArgs(t *testing.T) {
	for _, args := range [][]string{
		{"--nope"},
		{"--image", "noequals"},
		{"--log-level", "loud"},
		{"extra"},
		{"image"},
		{"image", "import", "onlyname"},
		{"image", "import", "--data", t.TempDir(), "name", "/does/not/exist.tar"},
		{"--listen", "256.0.0.1:99999", "--data", t.TempDir()},
		{"--disk-quota", "lots", "--data", t.TempDir()},
		{"--shm-size", "0", "--data", t.TempDir()},
		{"--allow-host", "example.com:80", "--data", t.TempDir()},
		{"--default-memory", "lots", "--data", t.TempDir()},
		{"--volume-root", "relative/dir", "--data", t.TempDir()},
		{"--volume-root", "/does/not/exist", "--data", t.TempDir()},
	} {
		if err := run(context.Background(), args, env(nil), &syncBuffer{}); err == nil {
			t.Errorf("run(%q) = nil, want an error", args)
		}
	}
}

// TestRunWithoutRuntime: without a usable OCI runtime sandboxd exits at once
// with a message naming the package to install.
func TestRunWithoutRuntime(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := run(ctx, []string{"--listen", "127.0.0.1:0", "--data", t.TempDir(), "--runtime", filepath.Join(t.TempDir(), "runc")}, env(nil), &syncBuffer{})
	if err == nil || !strings.Contains(err.Error(), "apt-get install runc") {
		t.Fatalf("run = %v, want an error naming the runc package", err)
	}
	if ctx.Err() != nil {
		t.Fatal("run did not exit at once")
	}
}

func TestImageImport(t *testing.T) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Name: "etc/", Typeflag: tar.TypeDir, Mode: 0o755})
	tw.WriteHeader(&tar.Header{Name: "etc/os-release", Typeflag: tar.TypeReg, Mode: 0o644, Size: 5})
	tw.Write([]byte("tiny\n"))
	tw.Close()
	tarball := filepath.Join(t.TempDir(), "rootfs.tar")
	if err := os.WriteFile(tarball, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	data := t.TempDir()
	out := &syncBuffer{}
	if err := run(context.Background(), []string{"image", "import", "--data", data, "tiny:1", tarball}, env(nil), out); err != nil {
		t.Fatalf("image import: %v", err)
	}
	b, err := os.ReadFile(filepath.Join(data, "images", "tiny_1", "etc", "os-release"))
	if err != nil || string(b) != "tiny\n" {
		t.Errorf("imported file = %q, %v", b, err)
	}
	if !strings.Contains(out.String(), "imported tiny:1") {
		t.Errorf("output = %q", out)
	}
}

// TestRunAPIKeySources: the key comes from --api-key-file (its first line),
// the environment, or --api-key with a warning that every host user reads
// it; two sources, a missing file and an empty one are refused.
func TestRunAPIKeySources(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "key")
	if err := os.WriteFile(file, []byte("from-file\nignored\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		flag, file, env, want string
		warn, fail            bool
	}{
		{file: file, env: "from-env", want: "from-file"},
		{env: "from-env", want: "from-env"},
		{flag: "from-flag", want: "from-flag", warn: true},
		{},
		{flag: "x", file: file, fail: true},
		{file: filepath.Join(dir, "missing"), fail: true},
		{file: empty, fail: true},
	} {
		var out bytes.Buffer
		got, err := resolveAPIKey(c.flag, c.file, c.env, &out)
		if c.fail {
			if err == nil {
				t.Errorf("%+v: key %q, want an error", c, got)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%+v: %q, %v; want %q", c, got, err, c.want)
		}
		if warned := strings.Contains(out.String(), "readable by every user"); warned != c.warn {
			t.Errorf("%+v: warned %v, want %v", c, warned, c.warn)
		}
		if strings.Contains(out.String(), got) && got != "" {
			t.Errorf("%+v: the key is printed: %q", c, out.String())
		}
	}
}

// TestRunNeedsRoot: started as another user than root, sandboxd says at once
// that it needs root, before anything fails on a permission.
func TestRunNeedsRoot(t *testing.T) {
	defer func(f func() int) { geteuid = f }(geteuid)
	geteuid = func() int { return 1000 }
	data := filepath.Join(t.TempDir(), "data")
	for _, args := range [][]string{
		{"--listen", "127.0.0.1:0", "--data", data},
		{"--listen", "127.0.0.1:0", "--data", data, "--no-isolation"}, // the run directory is root's too
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second) // without the check, the server would serve until then
		err := run(ctx, args, env(nil), &syncBuffer{})
		cancel()
		if !errors.Is(err, errNeedsRoot) || err.Error() != "sandboxd needs root (user namespaces, mounts, cgroups)" {
			t.Errorf("run(%q) as uid 1000 = %v, want %q", args, err, errNeedsRoot)
		}
	}
	if _, err := os.Stat(data); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the data directory was created before the refusal: %v", err)
	}
}
