package alineo

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/testenv"
)

// sliceRefetch serves chunks from a full copy, like the ledger would.
func sliceRefetch(all *[]chunk, mu *sync.Mutex) func(context.Context, int, int) ([]chunk, error) {
	return func(_ context.Context, from, to int) ([]chunk, error) {
		mu.Lock()
		defer mu.Unlock()
		return append([]chunk(nil), (*all)[from:to]...), nil
	}
}

func TestOutputEveryReaderFromFirstChunk(t *testing.T) {
	var all []chunk
	var mu sync.Mutex
	o := newOutput(64, sliceRefetch(&all, &mu)) // tiny window: forces drops and read-back
	const n = 200
	var want bytes.Buffer
	produce := func() {
		for i := range n {
			c := chunk{stream: events.Stdout, data: fmt.Appendf(nil, "line %03d\n", i)}
			mu.Lock()
			all = append(all, c)
			mu.Unlock()
			if err := o.publish(context.Background(), c); err != nil {
				t.Errorf("publish: %v", err)
			}
		}
		o.finish(nil)
	}
	for i := range n {
		fmt.Fprintf(&want, "line %03d\n", i)
	}

	read := func() (string, error) {
		var b bytes.Buffer
		err := o.each(func(c chunk) bool { b.Write(c.data); return true })
		return b.String(), err
	}
	var wg sync.WaitGroup
	results := make([]string, 3)
	wg.Go(func() { results[0], _ = read() }) // attached from the start (probably)
	wg.Go(produce)
	wg.Go(func() { results[1], _ = read() })
	wg.Wait()
	results[2], _ = read() // attached after the end: everything from the ledger
	for i, got := range results {
		if got != want.String() {
			t.Errorf("reader %d got %d bytes, want %d (every reader from the first chunk)", i, len(got), want.Len())
		}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.size > o.window+9 {
		t.Errorf("retained %d bytes after the end, want <= window %d + one chunk", o.size, o.window)
	}
}

func TestOutputProducerWaitsForSlowReader(t *testing.T) {
	o := newOutput(16, nil)
	gate := make(chan struct{})
	readerDone := make(chan error, 1)
	started := make(chan struct{})
	go func() {
		first := true
		readerDone <- o.each(func(c chunk) bool {
			if first {
				first = false
				close(started)
				<-gate
			}
			return true
		})
	}()
	testenv.Eventually(t, 5*time.Second, func() error {
		o.mu.Lock()
		defer o.mu.Unlock()
		if len(o.readers) != 1 {
			return errors.New("reader not attached yet")
		}
		return nil
	})
	if err := o.publish(context.Background(), chunk{data: bytes.Repeat([]byte("a"), 16)}); err != nil {
		t.Fatal(err)
	}
	<-started
	// The reader holds chunk 0; chunk 1 fills the window again and is not read yet.
	if err := o.publish(context.Background(), chunk{data: bytes.Repeat([]byte("b"), 16)}); err != nil {
		t.Fatal(err)
	}
	// The window is full and the only reader has not taken chunk 1: publish waits.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	if err := o.publish(ctx, chunk{data: []byte("b")}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("publish with a full window = %v, want DeadlineExceeded", err)
	}
	close(gate)
	if err := o.publish(context.Background(), chunk{data: []byte("c")}); err != nil {
		t.Fatal(err)
	}
	o.finish(errors.New("the end"))
	if err := <-readerDone; err == nil || err.Error() != "the end" {
		t.Fatalf("each = %v, want the terminal error", err)
	}
}

func TestOutputEarlyStop(t *testing.T) {
	o := newOutput(1<<20, nil)
	for i := range 5 {
		if err := o.publish(context.Background(), chunk{data: []byte{byte('0' + i)}}); err != nil {
			t.Fatal(err)
		}
	}
	var got []byte
	err := o.each(func(c chunk) bool { got = append(got, c.data...); return len(got) < 2 })
	if err != nil || string(got) != "01" {
		t.Fatalf("each = %q, %v; want \"01\", nil", got, err)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.readers) != 0 {
		t.Fatalf("%d readers still attached after an early stop", len(o.readers))
	}
}

func TestOutputPublishLast(t *testing.T) {
	boom := errors.New("boom")
	tests := []struct {
		name string
		err  error
	}{
		{name: "success", err: nil},
		{name: "exec error", err: boom},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := newOutput(outputWindow, nil)
			if err := o.publish(context.Background(), chunk{stream: events.Stdout, data: []byte("a")}); err != nil {
				t.Fatal(err)
			}
			if err := o.publishLast(context.Background(), chunk{stream: events.Stderr, data: []byte("b")}, tt.err); err != nil {
				t.Fatal(err)
			}
			var got []string
			err := o.each(func(c chunk) bool {
				got = append(got, string(c.stream)+":"+string(c.data))
				return true
			})
			if want := []string{"stdout:a", "stderr:b"}; fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("chunks = %v, want %v", got, want)
			}
			if err != tt.err {
				t.Errorf("each err = %v, want %v", err, tt.err)
			}
			if err := o.result(); err != tt.err {
				t.Errorf("result = %v, want %v", err, tt.err)
			}
		})
	}
}

func TestOutputPublishLastCancelledLeavesOutputOpen(t *testing.T) {
	o := newOutput(1, nil) // window of one byte
	// A reader that stops in its first chunk keeps the window full.
	started := make(chan struct{})
	release := make(chan struct{})
	go o.each(func(chunk) bool { close(started); <-release; return false })
	defer close(release)
	testenv.Eventually(t, 5*time.Second, func() error {
		o.mu.Lock()
		defer o.mu.Unlock()
		if len(o.readers) != 1 {
			return fmt.Errorf("%d readers attached, want 1", len(o.readers))
		}
		return nil
	})
	for _, s := range []string{"a", "x"} {
		if err := o.publish(context.Background(), chunk{stream: events.Stdout, data: []byte(s)}); err != nil {
			t.Fatal(err)
		}
		if s == "a" {
			<-started
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := o.publishLast(ctx, chunk{stream: events.Stdout, data: []byte("b")}, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("publishLast = %v, want context.DeadlineExceeded", err)
	}
	o.mu.Lock()
	done, n := o.done, o.base+len(o.chunks)
	o.mu.Unlock()
	if done || n != 2 {
		t.Fatalf("after a cancelled publishLast: done %v, %d chunks; want false, 2", done, n)
	}
}
