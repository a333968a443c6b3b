package sandboxd

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/alineo-labs/alineo/sandboxd/images"
	"github.com/alineo-labs/alineo/sandboxd/internal/runtime"
	"github.com/alineo-labs/alineo/sandboxd/snapshots"
)

// Server is an OpenSandbox-compatible lifecycle server in front of the
// runtime of its sandboxes (package sandboxd/internal/runtime). It is an
// http.Handler (routes under /v1 and at the root); Start serves it on
// Config.Listen. Safe for concurrent use.
type Server struct {
	cfg     Config
	log     *slog.Logger
	dataDir string
	tempDir bool
	lock    *os.File // flock on DataDir/.lock while the server lives
	handler http.Handler
	// recordDelay is how long persistLater waits (transitionRecordDelay).
	recordDelay time.Duration

	rt     *runtime.Runtime
	runDir string // the runtime's run directory
	img    *imageResolver
	vol    *volumeResolver
	// gcMu is held shared by each start from the check that its image's
	// layers are there to its record naming the digest, exclusively by
	// GCImages.
	gcMu sync.RWMutex

	// apiPort is the port Start listens on, which egress proxies never dial.
	apiPort atomic.Int32

	stop     chan struct{}
	bg       sync.WaitGroup // janitor and sandbox goroutines
	httpSrv  *http.Server
	serveErr chan error

	mu        sync.Mutex
	sandboxes map[string]*sandbox
	seq       int64
	closed    bool
	started   bool

	snap *snapStore
}

// sandbox is one sandbox: its record and, while it runs, its process.
type sandbox struct {
	// op serializes lifecycle operations (launch, pause, resume, stop).
	op sync.Mutex

	mu     sync.Mutex
	rec    record
	proc   *runtime.Process
	cancel context.CancelFunc // cancels a launch in progress
	ended  time.Time          // when it reached a final state
	// auth is the create request's image.auth, kept in memory only for
	// the pull of its launch.
	auth *images.Auth
	// changed is closed and replaced at every state change (setStatus).
	changed chan struct{}
	// disk orders the writes of rec's file (persist, persistUnlocked,
	// persistLater).
	disk recordDisk
}

// recordDisk orders the writes of one record file (a sandbox's, or a
// snapshot's): each version is numbered when it is encoded (under the lock
// that guards the record: sandbox.mu, snapStore.mu) and written only if it
// is newer than the last one written, so a write made outside that lock
// never replaces a later one. Once the record is removed nothing more is
// written.
type recordDisk struct {
	encoded uint64 // versions encoded; guarded by the record's lock
	// later: a write of the latest version is due (persistLater); guarded
	// by sandbox.mu.
	later bool

	mu      sync.Mutex // guards written and gone
	written uint64     // version of the file on disk
	gone    bool
}

// recordVersion is one encoded version of a record.
type recordVersion struct {
	id  string
	n   uint64
	b   []byte
	err error // encoding's
}

// next numbers the version of record id encoded as b (or that failed to
// encode with err). The record's lock must be held.
func (d *recordDisk) next(id string, b []byte, err error) recordVersion {
	d.encoded++
	return recordVersion{id: id, n: d.encoded, b: b, err: err}
}

// write writes v with write unless a later version is on disk or the record
// was removed.
func (d *recordDisk) write(v recordVersion, write func(id string, b []byte) error) error {
	if v.err != nil {
		return v.err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.gone || v.n <= d.written {
		return nil
	}
	if err := write(v.id, v.b); err != nil {
		return err
	}
	d.written = v.n
	return nil
}

// drop runs remove (which deletes the record's file; nil when the caller
// removes it later) with the writes held off; once it succeeds, nothing
// more is written.
func (d *recordDisk) drop(remove func() error) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if remove != nil {
		if err := remove(); err != nil {
			return err
		}
	}
	d.gone = true
	return nil
}

// setStatus records a state change and wakes the waiters. sb.mu must be held.
func (sb *sandbox) setStatus(s State, reason, msg string) {
	sb.rec.setStatus(s, reason, msg)
	if sb.changed != nil {
		close(sb.changed)
	}
	sb.changed = make(chan struct{})
}

// waitWhile waits until sb's state is not one of states, or ctx ends, and
// returns the state it saw last.
func (sb *sandbox) waitWhile(ctx context.Context, states ...State) State {
	for {
		sb.mu.Lock()
		st := sb.rec.Status.State
		if sb.changed == nil {
			sb.changed = make(chan struct{})
		}
		ch := sb.changed
		sb.mu.Unlock()
		if !slices.Contains(states, st) {
			return st
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return st
		}
	}
}

func (sb *sandbox) snapshot() Sandbox {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	return cloneSandbox(sb.rec.Sandbox)
}

func cloneSandbox(s Sandbox) Sandbox {
	if s.Metadata != nil {
		m := make(map[string]string, len(s.Metadata))
		for k, v := range s.Metadata {
			m[k] = v
		}
		s.Metadata = m
	}
	s.Entrypoint = append([]string(nil), s.Entrypoint...)
	if s.Image != nil {
		img := *s.Image
		img.Auth = nil
		s.Image = &img
	}
	return s
}

// Open returns a server for cfg. It creates the data directory, takes its
// lock and loads the records a previous run left there: sandboxes that were
// live come back Terminated with reason "sandboxd_restart", their leftovers
// removed. It starts no listener; Start serves.
func Open(ctx context.Context, cfg Config) (*Server, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	roots, err := resolveVolumeRoots(cfg.VolumeRoots)
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, log: cfg.Logger, stop: make(chan struct{}), sandboxes: map[string]*sandbox{},
		recordDelay: transitionRecordDelay}
	if cfg.DataDir == "" {
		d, err := os.MkdirTemp("", "sandboxd-*")
		if err != nil {
			return nil, fmt.Errorf("sandboxd: data dir: %w", err)
		}
		s.dataDir, s.tempDir = d, true
	} else {
		if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
			return nil, fmt.Errorf("sandboxd: data dir: %w", err)
		}
		s.dataDir = cfg.DataDir
	}
	lock, err := lockDataDir(s.dataDir)
	if err != nil {
		return nil, err
	}
	s.lock = lock
	s.vol = &volumeResolver{dir: filepath.Join(s.dataDir, "volumes"), roots: roots, noIsolation: cfg.NoIsolation, quota: cfg.VolumeQuota, log: s.log}
	s.rt = runtime.New(runtimeConfig(cfg, s.dataDir, s.guardDial(cfg.EgressDial), s.log))
	s.runDir = s.rt.RunDir()
	// What an earlier run left mounted (it died) goes first.
	s.rt.Recover()
	if !cfg.NoIsolation {
		if err := prepareVolumes(s.vol.dir); err != nil {
			lock.Close()
			return nil, fmt.Errorf("sandboxd: %w", err)
		}
		if err := s.vol.mountDisks(); err != nil {
			_ = s.vol.unmountDisks()
			lock.Close()
			return nil, fmt.Errorf("sandboxd: %w", err)
		}
	}
	store, err := openImageStore(s.dataDir, cfg)
	if err != nil {
		lock.Close()
		return nil, err
	}
	s.img = &imageResolver{cfg: cfg, dataDir: s.dataDir, log: s.log, store: store}
	recs, err := s.loadRecords()
	if err != nil {
		lock.Close()
		return nil, err
	}
	if s.snap, err = openSnapshots(ctx, s); err != nil {
		lock.Close()
		return nil, err
	}
	for _, r := range recs {
		sb := &sandbox{rec: *r}
		if !r.Status.State.Final() {
			sb.setStatus(StateTerminated, ReasonRestart, fmt.Sprintf("sandboxd restarted while the sandbox was %s; its processes did not survive", r.Status.State))
			sb.rec.ExecdPort, sb.rec.EgressAPIPort, sb.rec.InitPID = 0, 0, 0
			if err := s.saveRecord(&sb.rec); err != nil {
				s.snap.db.Close()
				s.snap.blobs.Close()
				lock.Close()
				return nil, err
			}
			// A server that died leaves its sandboxes' containers behind (a
			// frozen one's processes alive) and their mounts: remove them.
			s.rt.CleanLeftovers(r.ID)
			s.rt.RemoveRuntimeDirs(r.ID)
		}
		if sb.rec.Status.LastTransitionAt != nil {
			sb.ended = *sb.rec.Status.LastTransitionAt
		}
		s.sandboxes[r.ID] = sb
		s.seq = max(s.seq, r.Seq)
	}
	if cfg.NoIsolation {
		s.log.Warn("sandboxd: *** NO ISOLATION *** sandboxes run as plain host processes with full access to this machine; development only")
	}
	s.handler = s.routes()
	cfg.Metrics.attach(s)
	s.bg.Add(2)
	go s.janitor()
	go s.snap.gcLoop()
	return s, nil
}

// DataDir returns the directory the server keeps its state in.
func (s *Server) DataDir() string { return s.dataDir }

// ServeHTTP serves the lifecycle API.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.handler.ServeHTTP(w, r) }

// Start listens on Config.Listen and serves in the background; it returns the
// base URL (http://host:port, without /v1). It fails with ErrIsolationUnavailable
// when the kernel refuses namespaces and NoIsolation is not set.
func (s *Server) Start(ctx context.Context) (string, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return "", ErrClosed
	}
	if s.started {
		s.mu.Unlock()
		return "", errors.New("sandboxd: already started")
	}
	s.started = true
	s.mu.Unlock()
	if err := s.rt.Check(ctx); err != nil {
		return "", err
	}
	s.rt.RefillDisks()
	if err := s.img.prepareImages(ctx); err != nil {
		return "", err
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", s.cfg.Listen)
	if err != nil {
		return "", fmt.Errorf("sandboxd: listen: %w", err)
	}
	s.httpSrv = &http.Server{Handler: s, ReadHeaderTimeout: 30 * time.Second}
	s.serveErr = make(chan error, 1)
	go func() { s.serveErr <- s.httpSrv.Serve(ln) }()
	s.apiPort.Store(int32(ln.Addr().(*net.TCPAddr).Port))
	url := "http://" + ln.Addr().String()
	s.log.Info("sandboxd: listening", "url", url, "data", s.dataDir, "isolation", !s.cfg.NoIsolation)
	return url, nil
}

// Close stops serving, kills every sandbox (each goes Terminated with reason
// "sandboxd_shutdown"), waits for its goroutines and removes a temporary data
// directory. Later calls return nil.
func (s *Server) Close(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	all := slices.Collect(maps.Values(s.sandboxes))
	s.mu.Unlock()
	close(s.stop)
	var errs []error
	if s.httpSrv != nil {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		if err := s.httpSrv.Shutdown(sctx); err != nil {
			_ = s.httpSrv.Close()
		}
		cancel()
		if err := <-s.serveErr; err != nil && !errors.Is(err, http.ErrServerClosed) {
			errs = append(errs, err)
		}
	}
	var wg sync.WaitGroup
	for _, sb := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.terminate(sb, ReasonShutdown, "sandboxd shut down")
		}()
	}
	wg.Wait()
	s.bg.Wait()
	if err := s.vol.unmountDisks(); err != nil {
		errs = append(errs, err)
	}
	if err := s.rt.Close(); err != nil {
		errs = append(errs, err)
	}
	if err := s.img.store.Close(); err != nil {
		errs = append(errs, err)
	}
	if err := s.snap.db.Close(); err != nil {
		errs = append(errs, err)
	}
	if err := s.snap.blobs.Close(); err != nil { // finishes filling the read cache
		errs = append(errs, err)
	}
	if err := s.lock.Close(); err != nil {
		errs = append(errs, err)
	}
	if s.tempDir {
		if err := os.RemoveAll(s.dataDir); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// lockDataDir takes an exclusive flock on dir/.lock so that two servers never
// share a data directory; the kernel releases it when the process dies.
func lockDataDir(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("sandboxd: lock data dir: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("sandboxd: %w: %s", ErrDataDirInUse, dir)
		}
		return nil, fmt.Errorf("sandboxd: lock data dir: %w", err)
	}
	return f, nil
}

func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func (s *Server) get(id string) (*sandbox, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sb, ok := s.sandboxes[id]
	if !ok {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	return sb, nil
}

// create validates req, records a Pending sandbox and launches it in the
// background. It returns the sandbox handle too (awaitStart waits on it).
func (s *Server) create(req *CreateRequest) (Sandbox, *sandbox, error) {
	lim, err := s.cfg.validateCreate(req)
	if err != nil {
		return Sandbox{}, nil, err
	}
	now := sandboxTime(time.Now())
	rec := record{
		Sandbox: Sandbox{
			ID:         newID(),
			Platform:   req.Platform,
			Metadata:   req.Metadata,
			Entrypoint: req.Entrypoint,
			CreatedAt:  now,
		},
		Env:        req.Env,
		Limits:     lim,
		ExecdToken: newID(),
	}
	if req.SnapshotID != "" {
		snap, err := s.snap.readySnapshot(req.SnapshotID)
		if err != nil {
			return Sandbox{}, nil, err
		}
		rec.SnapshotID, rec.LowerImage, rec.ImageDigest = snap.ID, snap.Image, snap.ImageDigest
		if len(rec.Entrypoint) == 0 {
			rec.Entrypoint = append([]string(nil), defaultSnapshotEntrypoint...)
		}
	} else {
		rec.Image = &ImageSpec{URI: req.Image.URI}
		if err := s.img.checkImageName(req.Image.URI, len(req.Entrypoint) > 0); err != nil {
			return Sandbox{}, nil, err
		}
	}
	auth, err := parseImageAuth(req.Image)
	if err != nil {
		return Sandbox{}, nil, err
	}
	ttl := s.cfg.DefaultTimeout
	if req.Timeout != nil {
		ttl = time.Duration(*req.Timeout) * time.Second
	}
	if ttl > 0 {
		exp := now.Add(ttl)
		rec.ExpiresAt = &exp
	}
	vols, err := parseVolumes(req.Volumes)
	if err != nil {
		return Sandbox{}, nil, err
	}
	if rec.Volumes, err = s.vol.resolveVolumes(vols); err != nil {
		return Sandbox{}, nil, err
	}
	rec.setStatus(StatePending, "provisioning", "starting the sandbox")
	pol, netns, err := parseNetworkPolicy(req)
	if err != nil {
		return Sandbox{}, nil, err
	}
	if !hasNetworkPolicy(req) && !s.cfg.NoIsolation && !s.cfg.HostNetwork {
		pol, netns = HostPolicy(), true // with or without the credential proxy
	}
	if netns {
		rec.Egress, rec.NetworkPolicy, rec.EgressToken = true, pol, newID()
		rec.CredentialProxy = req.CredentialProxy != nil && req.CredentialProxy.Enabled
	}
	// The image pull is bounded by PullTimeout, the rest of the start by
	// StartTimeout (see start); cancel ends either.
	ctx, cancel := context.WithCancel(context.Background())
	sb := &sandbox{rec: rec, cancel: cancel, auth: auth}

	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		cancel()
		return Sandbox{}, nil, ErrClosed
	}
	live := 0
	for _, o := range s.sandboxes {
		o.mu.Lock()
		if !o.rec.Status.State.Final() {
			live++
		}
		o.mu.Unlock()
	}
	if live >= s.cfg.MaxSandboxes {
		s.mu.Unlock()
		cancel()
		return Sandbox{}, nil, fmt.Errorf("%w: %d live sandboxes, the configured maximum", ErrConflict, live)
	}
	if !s.cfg.NoIsolation {
		if sb.rec.IDBase, err = s.takeIDBase(); err != nil {
			s.mu.Unlock()
			cancel()
			return Sandbox{}, nil, err
		}
	}
	s.seq++
	sb.rec.Seq = s.seq
	if err := s.saveRecord(&sb.rec); err != nil {
		s.mu.Unlock()
		cancel()
		return Sandbox{}, nil, err
	}
	out := cloneSandbox(sb.rec.Sandbox)
	s.sandboxes[rec.ID] = sb
	sb.op.Lock() // held by the launch goroutine
	s.bg.Add(1)
	s.mu.Unlock()

	go func() {
		defer s.bg.Done()
		defer sb.op.Unlock()
		defer cancel()
		s.start(ctx, sb)
	}()
	return out, sb, nil
}

// start runs with sb.op held.
func (s *Server) start(ctx context.Context, sb *sandbox) {
	begun := time.Now()
	sb.mu.Lock()
	rec := sb.rec
	sb.mu.Unlock()
	failed := func(reason string, err error) {
		sb.mu.Lock()
		defer sb.mu.Unlock()
		if sb.rec.Status.State != StatePending {
			return
		}
		s.cfg.Metrics.created(begun, false)
		sb.setStatus(StateFailed, reason, s.public(err.Error()))
		sb.ended = time.Now()
		s.persist(sb)
		s.vol.removeVolumes(sb.rec.Volumes)
		s.log.Warn("sandboxd: sandbox failed to start", "id", rec.ID, "err", err)
	}
	if err := s.rt.Check(ctx); err != nil {
		failed(ReasonRuntimeError, err)
		return
	}
	fs, err := s.sandboxImage(ctx, sb, &rec)
	if err != nil {
		reason := imageReason(err)
		if reason != ReasonRuntimeError {
			err = withImageHint(rec.imageURI(), err)
		}
		failed(reason, err)
		return
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.StartTimeout)
	defer cancel()
	t0 := time.Now()
	if err := s.rt.PrepareDisk(ctx, rec.ID); err != nil {
		failed(ReasonRuntimeError, err)
		s.rt.RemoveRuntimeDirs(rec.ID)
		return
	}
	if rec.SnapshotID != "" {
		err := s.snap.restoreSnapshot(ctx, &rec)
		s.cfg.Metrics.snapshotOp(snapOpRestore, err)
		if err != nil {
			reason := ReasonRuntimeError
			if errors.Is(err, snapshots.ErrCorruptBlob) {
				reason = ReasonSnapshotCorrupt // the error names the file
			}
			failed(reason, fmt.Errorf("restore snapshot %s: %w", rec.SnapshotID, err))
			s.rt.RemoveRuntimeDirs(rec.ID)
			return
		}
	}
	s.log.Info("sandboxd: starting sandbox", "id", rec.ID, "image", rec.imageURI(), "snapshot", rec.SnapshotID, "rootfs", fs.Source)
	t1 := time.Now()
	p, err := s.rt.Launch(ctx, launchSpec(&rec, fs))
	if err != nil {
		reason := ReasonRuntimeError
		var ee *runtime.ExitError
		switch {
		case errors.As(err, &ee):
			reason = ReasonEntrypointExit
		case errors.Is(err, context.DeadlineExceeded):
			reason = ReasonProvisionTimout
		}
		failed(reason, err)
		s.rt.RemoveRuntimeDirs(rec.ID)
		return
	}
	sb.mu.Lock()
	if sb.rec.Status.State != StatePending {
		sb.mu.Unlock()
		s.rt.Kill(p)
		return
	}
	sb.proc = p
	sb.rec.ExecdPort = p.Port()
	sb.rec.EgressAPIPort = p.EgressAPIPort()
	sb.rec.InitPID = p.PID()
	sb.rec.ImageSource = fs.Source
	sb.setStatus(StateRunning, "running", "")
	s.cfg.Metrics.created(begun, true)
	s.log.Debug("sandboxd: sandbox running", "id", rec.ID, "disk", t1.Sub(t0), "launch", time.Since(t1))
	s.persist(sb)
	sb.mu.Unlock()
	s.bg.Add(1)
	go s.watch(sb, p)
}

// persist writes sb's record as it is now. sb.mu must be held.
func (s *Server) persist(sb *sandbox) { s.writeVersion(sb, encodeVersion(sb)) }

// persistUnlocked is persist for a caller that does not hold sb.mu: the
// record is encoded under sb.mu, as it is then, and written after sb.mu is
// released, so readers of the sandbox do not wait for the disk.
func (s *Server) persistUnlocked(sb *sandbox) {
	sb.mu.Lock()
	sb.disk.later = false // this write is the one due
	v := encodeVersion(sb)
	sb.mu.Unlock()
	s.writeVersion(sb, v)
}

// transitionRecordDelay is how long after a pause or resume its record is
// written.
// A restart ends every live sandbox whatever state its file holds (Open), so
// the file need not follow a pause at once: written later, the write keeps
// off the answer's way (next to a quarter-millisecond freeze it took a third
// of the call's round trip, even once the answer was sent, on the client's
// cores when it runs beside), and the transitions of a burst (pause, resume,
// pause) are written once.
const transitionRecordDelay = 100 * time.Millisecond

// persistLater writes sb's record s.recordDelay from now, or at once when the
// server stops, as it is then: a change made meanwhile rides along, and
// finds a write due (disk.later) rather than waiting for one of its own. The
// caller holds a place in s.bg.
func (s *Server) persistLater(sb *sandbox) {
	sb.mu.Lock()
	due := sb.disk.later
	sb.disk.later = true
	sb.mu.Unlock()
	if due {
		return
	}
	t := time.NewTimer(s.recordDelay)
	select {
	case <-s.stop:
	case <-t.C:
	}
	t.Stop()
	s.persistUnlocked(sb)
}

// encodeVersion encodes sb's record and numbers the version. sb.mu must be
// held: versions are numbered in the order of the states they hold.
func encodeVersion(sb *sandbox) recordVersion {
	b, err := encodeRecord(&sb.rec)
	return sb.disk.next(sb.rec.ID, b, err)
}

// writeVersion writes version v of sb's record unless a later version is on
// disk or sb was forgotten; it logs a failure.
func (s *Server) writeVersion(sb *sandbox, v recordVersion) {
	if err := sb.disk.write(v, s.writeRecord); err != nil {
		s.log.Error("sandboxd: persist record", "id", v.id, "err", err)
	}
}

// watch marks the sandbox Failed when its init exits on its own.
func (s *Server) watch(sb *sandbox, p *runtime.Process) {
	defer s.bg.Done()
	<-p.Done()
	sb.mu.Lock()
	if sb.proc != p || sb.rec.Status.State == StateStopping || sb.rec.Status.State.Final() {
		sb.mu.Unlock()
		return
	}
	id := sb.rec.ID
	msg, exited := p.Ended()
	reason := ReasonRuntimeError
	if exited {
		reason = ReasonEntrypointExit
	}
	sb.setStatus(StateFailed, reason, msg)
	sb.rec.ExecdPort, sb.rec.EgressAPIPort = 0, 0
	sb.ended = time.Now()
	sb.proc = nil
	s.persist(sb)
	sb.mu.Unlock()
	s.log.Warn("sandboxd: sandbox stopped on its own", "id", id, "why", msg)
	s.rt.Kill(p)
	s.rt.RemoveRuntimeDirs(id)
	s.vol.removeVolumes(sb.rec.Volumes)
}

// terminate stops a live sandbox and records it Terminated with reason. It
// reports whether the sandbox was live.
func (s *Server) terminate(sb *sandbox, reason, msg string) bool {
	sb.mu.Lock()
	st := sb.rec.Status.State
	if st.Final() {
		sb.mu.Unlock()
		return false
	}
	if st != StateStopping {
		sb.setStatus(StateStopping, reason, msg)
		s.persist(sb)
	}
	if sb.cancel != nil {
		sb.cancel()
	}
	sb.mu.Unlock()

	sb.op.Lock()
	defer sb.op.Unlock()
	sb.mu.Lock()
	p := sb.proc
	sb.proc = nil
	sb.mu.Unlock()
	if p != nil {
		s.rt.Kill(p)
	}
	s.rt.RemoveRuntimeDirs(sb.rec.ID)
	s.vol.removeVolumes(sb.rec.Volumes)
	sb.mu.Lock()
	if !sb.rec.Status.State.Final() {
		sb.setStatus(StateTerminated, reason, msg)
		sb.rec.ExecdPort, sb.rec.EgressAPIPort = 0, 0
		sb.ended = time.Now()
		s.persist(sb)
	}
	sb.mu.Unlock()
	return true
}

// remove deletes a sandbox: a live one is terminated, and its record is
// forgotten, so that it is 404 from then on, as on the real server.
func (s *Server) remove(id string) error {
	sb, err := s.get(id)
	if err != nil {
		return err
	}
	s.terminate(sb, ReasonUserDelete, "deleted by the user")
	s.forget(id)
	return nil
}

// awaitStart waits, up to StartTimeout and while ctx lasts, for sb to leave
// Pending, and returns what it looks like then.
func (s *Server) awaitStart(ctx context.Context, sb *sandbox) Sandbox {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.StartTimeout+5*time.Second)
	defer cancel()
	sb.waitWhile(ctx, StatePending)
	return sb.snapshot()
}

func (s *Server) forget(id string) {
	s.mu.Lock()
	sb := s.sandboxes[id]
	delete(s.sandboxes, id)
	s.mu.Unlock()
	if sb != nil { // a write of its record still to come must not bring the directory back
		_ = sb.disk.drop(nil) // removes nothing: cannot fail
	}
	ctx, cancel := s.untilStop(time.Minute)
	s.snap.dropLineage(ctx, id)
	cancel()
	if m := s.rt.Mounts(id); len(m) > 0 {
		s.log.Warn("sandboxd: sandbox dir still has mounts; kept", "id", id, "mounts", m)
		return
	}
	if err := os.RemoveAll(s.sandboxDir(id)); err != nil {
		s.log.Warn("sandboxd: remove sandbox dir", "id", id, "err", err)
	}
}

// pause moves a Running sandbox to Pausing, freezes it and returns once it is
// Paused (or the freeze failed: then it is Running again and the error is an
// *OpError), as the real server answers only then. The freeze goes on in the
// background if ctx ends first.
func (s *Server) pause(ctx context.Context, id string) error {
	return s.transition(ctx, id, "pause", StateRunning, StatePausing, StatePaused, s.rt.Freeze)
}

// resume moves a Paused sandbox to Resuming and thaws it, returning once it is
// Running (see pause).
func (s *Server) resume(ctx context.Context, id string) error {
	return s.transition(ctx, id, "resume", StatePaused, StateResuming, StateRunning, s.rt.Thaw)
}

func (s *Server) transition(ctx context.Context, id, op string, from, via, to State, f func(context.Context, *runtime.Process) error) error {
	sb, err := s.get(id)
	if err != nil {
		return err
	}
	done := make(chan error, 1)
	sb.mu.Lock()
	if sb.rec.Status.State != from || sb.proc == nil {
		st := sb.rec.Status.State
		sb.mu.Unlock()
		return &StateError{SandboxID: id, Op: op, State: st}
	}
	// The record is written with the transition's outcome, off the answer's
	// path (runTransition, then once ctx ends): a restart ends every live
	// sandbox whatever state its file holds (Open), so writing via first
	// would only delay f.
	sb.setStatus(via, op+"_requested", "")
	sb.mu.Unlock()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return ErrClosed
	}
	s.bg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.bg.Done()
		changed, err := s.runTransition(sb, op, from, via, to, f)
		done <- err
		if changed {
			s.persistLater(sb)
		}
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// runTransition runs f on sb's process with sb.op held and records the state
// it led to: to, or from again when f failed. It returns the failure as an
// *OpError, or a *StateError when the sandbox left via meanwhile (a delete).
// It does not write the record: changed says whether the caller must, off
// the answer's way (persistLater).
func (s *Server) runTransition(sb *sandbox, op string, from, via, to State, f func(context.Context, *runtime.Process) error) (changed bool, err error) {
	sb.op.Lock()
	defer sb.op.Unlock()
	sb.mu.Lock()
	p, id := sb.proc, sb.rec.ID
	if st := sb.rec.Status.State; st != via || p == nil {
		sb.mu.Unlock()
		return false, &StateError{SandboxID: id, Op: op, State: st}
	}
	sb.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	err = f(ctx, p)
	cancel()
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if st := sb.rec.Status.State; st != via {
		return false, &StateError{SandboxID: id, Op: op, State: st}
	}
	if err != nil {
		s.log.Error("sandboxd: "+op, "id", id, "err", err)
		sb.setStatus(from, op+"_failed", s.public(err.Error()))
		return true, &OpError{SandboxID: id, Op: op, Err: err}
	}
	sb.setStatus(to, "", "")
	return true, nil
}

// renew sets a new expiry, which must be in the future and later than the
// current one.
func (s *Server) renew(id string, at time.Time) (time.Time, error) {
	sb, err := s.get(id)
	if err != nil {
		return time.Time{}, err
	}
	at = sandboxTime(at)
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if sb.rec.Status.State.Final() || sb.rec.Status.State == StateStopping {
		return time.Time{}, &StateError{SandboxID: id, Op: "renew", State: sb.rec.Status.State}
	}
	if !at.After(time.Now()) {
		return time.Time{}, invalid("INVALID_EXPIRATION", "expiresAt", "expiresAt %s is not in the future", at.Format(time.RFC3339))
	}
	if sb.rec.ExpiresAt != nil && !at.After(*sb.rec.ExpiresAt) {
		return time.Time{}, invalid("EXPIRATION_NOT_EXTENDED", "expiresAt", "expiresAt %s is not later than the current %s", at.Format(time.RFC3339), sb.rec.ExpiresAt.Format(time.RFC3339))
	}
	sb.rec.ExpiresAt = &at
	s.persist(sb)
	return at, nil
}

// patchMetadata applies a JSON merge patch to the sandbox's metadata.
func (s *Server) patchMetadata(id string, patch map[string]*string) (Sandbox, error) {
	sb, err := s.get(id)
	if err != nil {
		return Sandbox{}, err
	}
	for k, v := range patch {
		if err := validateMetaKey(k); err != nil {
			return Sandbox{}, err
		}
		if v != nil {
			if err := validateMetaValue(k, *v); err != nil {
				return Sandbox{}, err
			}
		}
	}
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if len(patch) > 0 {
		if sb.rec.Metadata == nil {
			sb.rec.Metadata = map[string]string{}
		}
		for k, v := range patch {
			if v == nil {
				delete(sb.rec.Metadata, k)
			} else {
				sb.rec.Metadata[k] = *v
			}
		}
		if len(sb.rec.Metadata) == 0 {
			sb.rec.Metadata = nil
		}
		s.persist(sb)
	}
	return cloneSandbox(sb.rec.Sandbox), nil
}

// list returns the sandboxes matching the filters, oldest first.
func (s *Server) list(states map[State]bool, meta map[string]string) []Sandbox {
	type item struct {
		v   Sandbox
		seq int64
	}
	var items []item
	for _, sb := range s.all() {
		sb.mu.Lock()
		seq := sb.rec.Seq
		sb.mu.Unlock()
		v := sb.snapshot()
		if len(states) > 0 && !states[v.Status.State] {
			continue
		}
		ok := true
		for k, want := range meta {
			if got, has := v.Metadata[k]; !has || got != want {
				ok = false
				break
			}
		}
		if ok {
			items = append(items, item{v, seq})
		}
	}
	sort.Slice(items, func(i, j int) bool {
		a, b := items[i], items[j]
		if !a.v.CreatedAt.Equal(b.v.CreatedAt) {
			return a.v.CreatedAt.Before(b.v.CreatedAt)
		}
		return a.seq < b.seq
	})
	out := make([]Sandbox, len(items))
	for i, it := range items {
		out[i] = it.v
	}
	return out
}

// janitor expires sandboxes past their TTL and forgets final records past
// Retention.
func (s *Server) janitor() {
	defer s.bg.Done()
	t := time.NewTicker(s.cfg.SweepInterval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		s.sweep(time.Now())
	}
}

// all returns every sandbox the server knows, in no order, read under s.mu; the
// caller locks each sandbox itself.
func (s *Server) all() []*sandbox {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Collect(maps.Values(s.sandboxes))
}

func (s *Server) sweep(now time.Time) {
	for _, sb := range s.all() {
		sb.mu.Lock()
		st, exp, ended, id := sb.rec.Status.State, sb.rec.ExpiresAt, sb.ended, sb.rec.ID
		sb.mu.Unlock()
		switch {
		case st.Final() && !ended.IsZero() && now.Sub(ended) > s.cfg.Retention:
			s.forget(id)
		case !st.Final() && st != StateStopping && exp != nil && now.After(*exp):
			s.log.Info("sandboxd: sandbox expired", "id", id)
			s.mu.Lock()
			if s.closed {
				s.mu.Unlock()
				return
			}
			s.bg.Add(1)
			s.mu.Unlock()
			go func() {
				defer s.bg.Done()
				s.terminate(sb, ReasonTTLExpiry, "the sandbox's timeout expired")
			}()
		}
	}
}

// untilStop returns a context that ends after d or when the server stops.
func (s *Server) untilStop(d time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	go func() {
		select {
		case <-s.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}
