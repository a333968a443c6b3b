package testenv_test

import (
	"testing"

	"gocloud.dev/blob"
	_ "gocloud.dev/blob/s3blob"

	"github.com/alineo-labs/alineo/testenv"
)

// TestS3 writes and reads an object through the AWS SDK, stops the server
// (writes fail) and starts it again (the object is still there).
func TestS3(t *testing.T) {
	s := testenv.S3(t)
	name, err := s.NewBucket()
	if err != nil {
		t.Fatal(err)
	}
	b, err := blob.OpenBucket(t.Context(), s.URL(name))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.WriteAll(t.Context(), "a/b", []byte("hello"), nil); err != nil {
		t.Fatal(err)
	}
	if got, err := b.ReadAll(t.Context(), "a/b"); err != nil || string(got) != "hello" {
		t.Fatalf("ReadAll = %q, %v; want hello", got, err)
	}
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := b.WriteAll(t.Context(), "a/c", []byte("x"), nil); err == nil {
		t.Fatal("write to a stopped server succeeded")
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	if got, err := b.ReadAll(t.Context(), "a/b"); err != nil || string(got) != "hello" {
		t.Fatalf("ReadAll after restart = %q, %v; want hello", got, err)
	}
}
