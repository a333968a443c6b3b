package snapshots

import (
	"container/list"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/alineo-labs/alineo/checkpoints"
)

// errTooBig: a blob larger than the whole cache is read from the bucket
// without being cached.
var errTooBig = errors.New("blob larger than the cache")

// cache is a remote store's local read cache: checked blobs in a directory
// (sha256/k[:2]/k, read-only), at most max bytes, the least recently used
// evicted first. A blob being downloaded is downloaded once however many
// readers want it. Evicting a blob that a reader has open is safe: the
// reader keeps its file. Safe for concurrent use.
type cache struct {
	dir string
	max int64

	mu       sync.Mutex
	size     int64
	lru      *list.List               // of *cacheEntry, most recently used first
	index    map[string]*list.Element // by key
	inflight map[string]*fetch        // downloads under way, by key
}

type cacheEntry struct {
	key  string
	size int64
}

// fetch is one download; done is closed when it ends, with err set.
type fetch struct {
	done chan struct{}
	err  error
}

// openCache opens the cache in dir, keeping the blobs an earlier run left
// (oldest evicted first) and removing its temp files.
func openCache(dir string, max int64, now time.Time) (*cache, error) {
	c := &cache{dir: dir, max: max, lru: list.New(), index: map[string]*list.Element{}, inflight: map[string]*fetch{}}
	if err := os.MkdirAll(c.tmpDir(), 0o700); err != nil {
		return nil, fmt.Errorf("open blob cache: %w", err)
	}
	for i := range 256 { // every sha256/xx, once, rather than a MkdirAll per blob
		if err := os.MkdirAll(filepath.Join(dir, "sha256", fmt.Sprintf("%02x", i)), 0o700); err != nil {
			return nil, fmt.Errorf("open blob cache: %w", err)
		}
	}
	ents, _ := os.ReadDir(c.tmpDir())
	for _, e := range ents {
		_ = os.Remove(filepath.Join(c.tmpDir(), e.Name()))
	}
	type found struct {
		key  string
		size int64
		t    time.Time
	}
	var all []found
	_ = filepath.WalkDir(filepath.Join(dir, "sha256"), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !ValidKey(d.Name()) {
			return nil
		}
		if info, err := d.Info(); err == nil {
			all = append(all, found{d.Name(), info.Size(), info.ModTime()})
		}
		return nil
	})
	sort.Slice(all, func(i, j int) bool { return all[i].t.After(all[j].t) })
	for _, f := range all {
		c.index[f.key] = c.lru.PushBack(&cacheEntry{key: f.key, size: f.size})
		c.size += f.size
	}
	c.mu.Lock()
	c.evict("")
	c.mu.Unlock()
	return c, nil
}

func (c *cache) tmpDir() string { return filepath.Join(c.dir, "tmp") }

func (c *cache) path(key string) string { return filepath.Join(c.dir, "sha256", key[:2], key) }

// has reports whether key is cached.
func (c *cache) has(key string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.index[key]
	return ok
}

// filler downloads key's content into w, checked, returning its size, or
// errTooBig before writing anything.
type filler func(ctx context.Context, key string, w io.Writer) (int64, error)

// open returns key's cached file, calling fill to download it into a temp
// file first when it is not cached (or waiting for the download under way).
// When this call downloads and also is not nil, the content is written to
// also as well and open returns a nil file: the caller has it. It returns
// errTooBig, from fill, for a blob larger than the cache.
func (c *cache) open(ctx context.Context, key string, fill filler, also io.Writer) (*os.File, error) {
	for {
		c.mu.Lock()
		if el, ok := c.index[key]; ok {
			c.lru.MoveToFront(el)
			c.mu.Unlock()
			f, err := os.Open(c.path(key))
			if err == nil {
				return f, nil
			}
			if !errors.Is(err, fs.ErrNotExist) {
				return nil, fmt.Errorf("read cached blob %s: %w", key, err)
			}
			c.remove(key) // removed behind our back: download again
			continue
		}
		if fe, ok := c.inflight[key]; ok {
			c.mu.Unlock()
			select {
			case <-fe.done:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			if fe.err != nil && !errors.Is(fe.err, context.Canceled) {
				return nil, fe.err
			}
			continue // cached now, or the other reader gave up: try again
		}
		fe := &fetch{done: make(chan struct{})}
		c.inflight[key] = fe
		c.mu.Unlock()
		fe.err = c.download(ctx, key, fill, also)
		c.mu.Lock()
		delete(c.inflight, key)
		c.mu.Unlock()
		close(fe.done)
		if fe.err != nil || also != nil {
			return nil, fe.err
		}
	}
}

// download fills a temp file (and also, if not nil) with fill and moves it
// into the cache.
func (c *cache) download(ctx context.Context, key string, fill filler, also io.Writer) error {
	// Read-only from the start: the descriptor still writes.
	f, err := os.OpenFile(filepath.Join(c.tmpDir(), key+"-"+checkpoints.NewToken()[:8]), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o444)
	if err != nil {
		return fmt.Errorf("cache blob %s: %w", key, err)
	}
	defer func() { _ = os.Remove(f.Name()) }() // fails once renamed
	var w io.Writer = f
	if also != nil {
		w = io.MultiWriter(f, also)
	}
	n, err := fill(ctx, key, w)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), c.path(key))
	}
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.index[key] = c.lru.PushFront(&cacheEntry{key: key, size: n})
	c.size += n
	c.evict(key)
	return nil
}

// evict removes the least recently used blobs but keep until the cache
// holds at most max bytes; callers hold c.mu.
func (c *cache) evict(keep string) {
	for c.size > c.max {
		el := c.lru.Back()
		if el == nil {
			return
		}
		if el.Value.(*cacheEntry).key == keep {
			if el = el.Prev(); el == nil {
				return
			}
		}
		c.drop(el)
	}
}

// drop forgets el and removes its file; callers hold c.mu.
func (c *cache) drop(el *list.Element) {
	e := el.Value.(*cacheEntry)
	c.lru.Remove(el)
	delete(c.index, e.key)
	c.size -= e.size
	_ = os.Remove(c.path(e.key))
}

// remove drops key from the cache.
func (c *cache) remove(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.index[key]; ok {
		c.drop(el)
	}
}

// stats returns the number of cached blobs and their bytes.
func (c *cache) stats() (int, int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Len(), c.size
}

// knownSet remembers up to max keys known to be stored (first in, first
// out), so that Has need not ask the bucket for each file of a capture.
type knownSet struct {
	mu   sync.Mutex
	max  int
	keys map[string]struct{}
	fifo []string
}

// knownKeys bounds a knownSet (about 10 MB of keys).
const knownKeys = 1 << 17

func newKnownSet(max int) *knownSet { return &knownSet{max: max, keys: map[string]struct{}{}} }

func (k *knownSet) add(key string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, ok := k.keys[key]; ok {
		return
	}
	for len(k.keys) >= k.max && len(k.fifo) > 0 {
		delete(k.keys, k.fifo[0])
		k.fifo = k.fifo[1:]
	}
	k.keys[key] = struct{}{}
	k.fifo = append(k.fifo, key)
	if len(k.fifo) > 2*k.max { // removed keys left slots behind: compact
		live := make([]string, 0, len(k.keys))
		seen := make(map[string]bool, len(k.keys))
		for _, key := range k.fifo {
			if _, ok := k.keys[key]; ok && !seen[key] {
				seen[key] = true
				live = append(live, key)
			}
		}
		k.fifo = live
	}
}

func (k *knownSet) has(key string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	_, ok := k.keys[key]
	return ok
}

// remove forgets key; its slot in fifo is skipped when it comes up.
func (k *knownSet) remove(key string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.keys, key)
}

// inflight reports whether key is being downloaded into the cache.
func (c *cache) downloading(key string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.inflight[key]
	return ok
}

// behind fills the cache after the fact with blobs that a restore
// downloaded straight into their destination files, so that a cold restore
// writes each byte once before the sandbox may start: it waits until no
// restore runs, reads a duplicate of the destination's descriptor (never
// its path, which the sandbox owns), checks the content against the key
// again (the sandbox may have written to the file meanwhile; such a copy is
// dropped) and moves it into the cache. Its queue is bounded: a blob that
// does not fit is simply not cached. One goroutine, stopped by close.
type behind struct {
	c    *cache
	jobs chan behindJob
	done chan struct{} // closed when the goroutine has returned

	// sendMu is held shared while sending on jobs, exclusively to close it.
	sendMu sync.RWMutex
	closed bool

	busyMu   sync.Mutex
	idle     *sync.Cond // signalled when busy drops to 0 or stopping is set
	busy     int        // restores running
	stopping bool
}

type behindJob struct {
	key  string
	f    *os.File // nil for a barrier
	size int64
	ack  chan struct{} // a barrier's, closed when reached
}

// behindQueue bounds the blobs waiting to be cached (and their descriptors).
const behindQueue = 1024

func startBehind(c *cache) *behind {
	w := &behind{c: c, jobs: make(chan behindJob, behindQueue), done: make(chan struct{})}
	w.idle = sync.NewCond(&w.busyMu)
	go w.run()
	return w
}

func (w *behind) run() {
	defer close(w.done)
	buf := make([]byte, 1<<20)
	for j := range w.jobs {
		if j.f == nil {
			close(j.ack)
			continue
		}
		w.busyMu.Lock()
		for w.busy > 0 && !w.stopping {
			w.idle.Wait()
		}
		w.busyMu.Unlock()
		if !w.c.has(j.key) && !w.c.downloading(j.key) {
			_ = w.c.download(context.Background(), j.key, func(_ context.Context, key string, dst io.Writer) (int64, error) {
				v := &verifier{r: io.NopCloser(io.NewSectionReader(j.f, 0, j.size)), key: key, h: sha256.New()}
				return io.CopyBuffer(dst, v, buf)
			}, nil)
		}
		_ = j.f.Close()
	}
}

// hold marks a restore running until the returned function is called;
// meanwhile the cache is not filled.
func (w *behind) hold() (release func()) {
	w.busyMu.Lock()
	w.busy++
	w.busyMu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			w.busyMu.Lock()
			if w.busy--; w.busy == 0 {
				w.idle.Broadcast()
			}
			w.busyMu.Unlock()
		})
	}
}

// add queues f (a descriptor of key's size bytes, which add closes) for the
// cache; when the queue is full or closed, f is closed and not cached.
func (w *behind) add(key string, f *os.File, size int64) {
	w.sendMu.RLock()
	defer w.sendMu.RUnlock()
	if !w.closed {
		select {
		case w.jobs <- behindJob{key: key, f: f, size: size}:
			return
		default:
		}
	}
	_ = f.Close()
}

// wait returns once the blobs queued before it are cached (or dropped),
// which is after the restores that queued them have returned.
func (w *behind) wait(ctx context.Context) error {
	ack := make(chan struct{})
	w.sendMu.RLock()
	if w.closed {
		w.sendMu.RUnlock()
		return nil
	}
	select {
	case w.jobs <- behindJob{ack: ack}:
		w.sendMu.RUnlock()
	case <-ctx.Done():
		w.sendMu.RUnlock()
		return ctx.Err()
	}
	select {
	case <-ack:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// close caches what is queued, without waiting for running restores, then
// stops the goroutine.
func (w *behind) close() {
	w.busyMu.Lock()
	w.stopping = true
	w.idle.Broadcast()
	w.busyMu.Unlock()
	w.sendMu.Lock()
	if !w.closed {
		w.closed = true
		close(w.jobs)
	}
	w.sendMu.Unlock()
	<-w.done
}
