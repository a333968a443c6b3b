package opensandbox_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/opensandbox"
	"github.com/alineo-labs/alineo/testenv"
)

// TestAgainstSandboxd runs the client against the embedded sandboxd:
// create → wait running → run echo → files round trip → delete.
func TestAgainstSandboxd(t *testing.T) {
	for _, proxy := range []bool{false, true} {
		name := "direct"
		if proxy {
			name = "server proxy"
		}
		t.Run(name, func(t *testing.T) {
			base := testenv.Sandboxd(t)
			c, err := opensandbox.New(opensandbox.Config{BaseURL: base, UseServerProxy: proxy})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()

			sb, err := c.CreateSandbox(ctx, opensandbox.CreateSandboxRequest{
				Image:          &opensandbox.ImageSpec{URI: "ubuntu:22.04"},
				Entrypoint:     []string{"tail", "-f", "/dev/null"},
				ResourceLimits: map[string]string{"cpu": "500m", "memory": "512Mi"},
				Metadata:       map[string]string{"test": "opensandbox"},
				Timeout:        10 * time.Minute,
			})
			if err != nil {
				t.Fatalf("CreateSandbox: %v", err)
			}
			deleted := false
			defer func() {
				if !deleted {
					_ = c.DeleteSandbox(context.WithoutCancel(ctx), sb.ID)
				}
			}()
			if _, err := c.WaitRunning(ctx, sb.ID); err != nil {
				t.Fatalf("WaitRunning: %v", err)
			}
			ex, err := c.Execd(ctx, sb.ID)
			if err != nil {
				t.Fatalf("Execd: %v", err)
			}
			defer ex.Close()

			// echo: output lines and exit codes.
			s, err := ex.RunCommand(ctx, opensandbox.CommandRequest{Command: "echo hello; echo err >&2; exit 3"})
			if err != nil {
				t.Fatalf("RunCommand: %v", err)
			}
			var stdout, stderr []string
			for s.Next() {
				switch ev := s.Event(); ev.Kind {
				case opensandbox.EventStdout:
					stdout = append(stdout, ev.Text)
				case opensandbox.EventStderr:
					stderr = append(stderr, ev.Text)
				}
			}
			if err := s.Err(); err != nil {
				t.Fatalf("stream: %v", err)
			}
			res, ok := s.Result()
			if !ok || res.ExitCode != 3 || res.ID == "" {
				t.Errorf("Result = %+v, %v; want exit 3 with an id", res, ok)
			}
			if strings.Join(stdout, "|") != "hello" || strings.Join(stderr, "|") != "err" {
				t.Errorf("stdout %q stderr %q", stdout, stderr)
			}
			start := time.Now()
			s, err = ex.RunCommand(ctx, opensandbox.CommandRequest{Command: "echo ok"})
			if err != nil {
				t.Fatal(err)
			}
			if res, err := s.Wait(); err != nil || res.ExitCode != 0 {
				t.Fatalf("echo ok = %+v, %v", res, err)
			}
			t.Logf("echo round trip %v", time.Since(start))

			// Files round trip.
			content := bytes.Repeat([]byte("0123456789abcdef"), 64<<10) // 1 MiB
			if err := ex.UploadFile(ctx, "/tmp/rt/data.bin", bytes.NewReader(content), opensandbox.Permission{Mode: 0o640}); err != nil {
				t.Fatalf("UploadFile: %v", err)
			}
			info, err := ex.FileInfo(ctx, "/tmp/rt/data.bin")
			if err != nil {
				t.Fatalf("FileInfo: %v", err)
			}
			if fi := info["/tmp/rt/data.bin"]; fi.Size != int64(len(content)) || fi.Mode != 0o640 {
				t.Errorf("info = %+v, want size %d mode 0640", fi, len(content))
			}
			rc, err := ex.DownloadFile(ctx, "/tmp/rt/data.bin")
			if err != nil {
				t.Fatalf("DownloadFile: %v", err)
			}
			got, err := io.ReadAll(rc)
			rc.Close()
			if err != nil || sha256.Sum256(got) != sha256.Sum256(content) {
				t.Fatalf("download: %d bytes, err %v; want the uploaded content", len(got), err)
			}
			rc, err = ex.DownloadRange(ctx, "/tmp/rt/data.bin", 16, 4)
			if err != nil {
				t.Fatalf("DownloadRange: %v", err)
			}
			part, _ := io.ReadAll(rc)
			rc.Close()
			if string(part) != "0123" {
				t.Errorf("range = %q, want 0123", part)
			}
			found, err := ex.SearchFiles(ctx, "/tmp/rt", "*.bin")
			if err != nil || len(found) != 1 {
				t.Errorf("SearchFiles = %+v, %v", found, err)
			}
			if err := ex.DeleteFiles(ctx, "/tmp/rt/data.bin"); err != nil {
				t.Fatalf("DeleteFiles: %v", err)
			}
			if _, err := ex.FileInfo(ctx, "/tmp/rt/data.bin"); !errors.Is(err, opensandbox.ErrNotFound) {
				t.Errorf("FileInfo after delete err = %v, want ErrNotFound", err)
			}

			if err := c.DeleteSandbox(ctx, sb.ID); err != nil {
				t.Fatalf("DeleteSandbox: %v", err)
			}
			deleted = true
			testenv.Eventually(t, 10*time.Second, func() error {
				got, err := c.GetSandbox(ctx, sb.ID)
				if errors.Is(err, opensandbox.ErrNotFound) {
					return nil
				}
				if err != nil {
					return err
				}
				if got.Status.State != opensandbox.StateTerminated {
					return errors.New("state " + string(got.Status.State))
				}
				return nil
			})
		})
	}
}
