package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/internal/testutil"
)

// VersityGWEnv names the variable that points testenv at a versitygw binary.
const VersityGWEnv = "VERSITYGW"

// VersityGWInstall is the command that installs the S3 server the tests run
// (make deps runs it when the binary is missing).
const VersityGWInstall = "GOBIN=/usr/local/bin go install github.com/versity/versitygw/cmd/versitygw@v1.8.0"

// S3Region is the region the S3 server answers for.
const S3Region = "us-east-1"

// S3Server is a real S3 server on loopback: versitygw serving a posix
// directory (each subdirectory a bucket). It may be stopped and started again
// on the same port and data, to see how clients cope with an outage.
type S3Server struct {
	bin    string
	dir    string // the served root; buckets are its subdirectories
	port   int
	Access string // the root user's access key
	Secret string // and secret

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
	log  string
}

// S3 starts an S3 server for t, stopped when t ends, and points the AWS
// environment at it (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION,
// with t.Setenv, so t must not be parallel). Without the versitygw binary
// ($VERSITYGW, PATH, /usr/local/bin or $GOPATH/bin) it skips t with the
// command that installs it, or fails t when CI=true.
func S3(t testing.TB) *S3Server {
	t.Helper()
	bin, err := FindVersityGW()
	if err != nil {
		SkipOrFail(t, fmt.Sprintf("no S3 server: %v (install it: %s, or make deps)", err, VersityGWInstall))
	}
	s, err := StartS3(bin, t.TempDir())
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Logf("testenv: %v", err)
		}
	})
	for k, v := range s.Env() {
		t.Setenv(k, v)
	}
	return s
}

// FindVersityGW returns the path of the versitygw binary: $VERSITYGW, else
// versitygw on PATH, in /usr/local/bin or in $GOPATH/bin.
func FindVersityGW() (string, error) {
	if p := os.Getenv(VersityGWEnv); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%s=%s: %w", VersityGWEnv, p, err)
		}
		return p, nil
	}
	return testutil.FindTool("versitygw")
}

// StartS3 starts versitygw (bin) serving dir/root on a free loopback port
// with fresh random credentials, and waits until it answers. Stop it with
// Stop.
func StartS3(bin, dir string) (*S3Server, error) {
	root := filepath.Join(dir, "root")
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, fmt.Errorf("start s3: %w", err)
	}
	ports, err := testutil.FreePorts(1)
	if err != nil {
		return nil, fmt.Errorf("start s3: %w", err)
	}
	port := ports[0]
	s := &S3Server{bin: bin, dir: root, port: port, Access: "alineo" + token(4), Secret: token(16), log: filepath.Join(dir, "versitygw.log")}
	if err := s.Start(); err != nil {
		return nil, err
	}
	return s, nil
}

func token(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Endpoint returns the server's URL (http://127.0.0.1:port).
func (s *S3Server) Endpoint() string { return "http://127.0.0.1:" + strconv.Itoa(s.port) }

// Dir returns the directory the server serves; bucket b is Dir()/b.
func (s *S3Server) Dir() string { return s.dir }

// Env returns the AWS environment that makes the SDK's default credential
// chain use the server's root user.
func (s *S3Server) Env() map[string]string {
	return map[string]string{
		"AWS_ACCESS_KEY_ID":     s.Access,
		"AWS_SECRET_ACCESS_KEY": s.Secret,
		"AWS_REGION":            S3Region,
	}
}

// NewBucket creates an empty bucket with a fresh name and returns the name.
func (s *S3Server) NewBucket() (string, error) {
	name := "b" + token(6)
	if err := os.Mkdir(filepath.Join(s.dir, name), 0o755); err != nil {
		return "", fmt.Errorf("create bucket: %w", err)
	}
	return name, nil
}

// URL returns the gocloud URL of bucket on this server:
// s3://bucket?endpoint=...&region=...&use_path_style=true.
func (s *S3Server) URL(bucket string) string {
	q := url.Values{}
	q.Set("endpoint", s.Endpoint())
	q.Set("region", S3Region)
	q.Set("use_path_style", "true")
	return "s3://" + bucket + "?" + q.Encode()
}

// Start starts the stopped server again, on the same port and data, and
// waits until it answers HTTP.
func (s *S3Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return errors.New("s3 server is running")
	}
	logf, err := os.OpenFile(s.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("start s3: %w", err)
	}
	defer logf.Close()
	cmd := exec.Command(s.bin, "--access", s.Access, "--secret", s.Secret, "--region", S3Region,
		"--port", "127.0.0.1:"+strconv.Itoa(s.port), "--quiet", "posix", s.dir)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Killed with this process (see cluster.start for why the thread is locked).
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	started, done := make(chan error, 1), make(chan struct{})
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the server
		err := cmd.Start()
		started <- err
		if err != nil {
			runtime.UnlockOSThread()
			return
		}
		_ = cmd.Wait()
		close(done)
	}()
	if err := <-started; err != nil {
		return fmt.Errorf("start s3: %w", err)
	}
	s.cmd, s.done = cmd, done
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(30 * time.Second)
	for wait := 5 * time.Millisecond; ; wait = min(2*wait, 200*time.Millisecond) {
		resp, err := client.Get(s.Endpoint() + "/")
		if err == nil {
			resp.Body.Close()
			return nil // any answer (403 for an unsigned request) means it serves
		}
		select {
		case <-done:
			s.cmd, s.done = nil, nil
			log, _ := os.ReadFile(s.log)
			return fmt.Errorf("versitygw exited: %s", lastLines(log, 5))
		case <-time.After(wait):
		}
		if time.Now().After(deadline) {
			s.kill()
			return fmt.Errorf("versitygw not ready after 30s: %w", err)
		}
	}
}

// Stop stops the server (SIGTERM, SIGKILL after 10s) and waits until it is
// gone and its port is closed. Stopping a stopped server does nothing.
func (s *S3Server) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return nil
	}
	_ = s.cmd.Process.Signal(syscall.SIGCONT)
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
		s.cmd, s.done = nil, nil
	case <-time.After(10 * time.Second):
		s.kill()
	}
	return waitClosed(s.port)
}

// Kill stops the server at once (SIGKILL), as a crash would.
func (s *S3Server) Kill() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return nil
	}
	s.kill()
	return waitClosed(s.port)
}

// kill kills the server's process group; callers hold s.mu.
func (s *S3Server) kill() {
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	<-s.done
	s.cmd, s.done = nil, nil
}

// waitClosed waits until nothing accepts connections on port.
func waitClosed(port int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for wait := time.Millisecond; ; wait = min(2*wait, 100*time.Millisecond) {
		c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), time.Second)
		if err != nil {
			return nil
		}
		c.Close()
		select {
		case <-ctx.Done():
			return fmt.Errorf("port %d still open after the s3 server stopped", port)
		case <-time.After(wait):
		}
	}
}
