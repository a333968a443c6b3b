package runtime

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestEntryLogBounded: however much is written, in whatever pieces, the log
// stays within its limit, holds the latest bytes, and says how many went.
func TestEntryLogBounded(t *testing.T) {
	for _, piece := range []int{1, 100, 4095, 5000, 70000} {
		t.Run(fmt.Sprint(piece), func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "entrypoint.log")
			l, err := openEntryLog(p, 8192)
			if err != nil {
				t.Fatal(err)
			}
			var all bytes.Buffer
			for i := 0; all.Len() < 200_000; i++ {
				b := bytes.Repeat([]byte{byte('a' + i%26)}, piece)
				all.Write(b)
				if n, err := l.Write(b); err != nil || n != len(b) {
					t.Fatalf("Write = %d, %v", n, err)
				}
				if l.size > 8192 {
					t.Fatalf("size %d after %d bytes, limit 8192", l.size, all.Len())
				}
			}
			l.f.Close()
			got, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			if int64(len(got)) > 8192 {
				t.Errorf("file is %d bytes, limit 8192", len(got))
			}
			head, tail, ok := bytes.Cut(got, []byte("]\n"))
			if !ok || !strings.HasPrefix(string(head), "[sandboxd: ") {
				t.Fatalf("log starts %q, want the dropped-bytes line", got[:min(len(got), 80)])
			}
			if !bytes.HasSuffix(all.Bytes(), tail) || len(tail) < 1024 {
				t.Errorf("log keeps %d bytes that are not the end of what was written", len(tail))
			}
			var dropped int
			fmt.Sscanf(string(head), "[sandboxd: %d", &dropped)
			if want := all.Len() - len(tail); dropped != want {
				t.Errorf("dropped line says %d, want %d", dropped, want)
			}
		})
	}
}
