package bus

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/alineo-labs/alineo/events"
)

// Defaults of Config.
const (
	DefaultStream              = "ALINEO_LEDGER"
	DefaultFencePrefix         = "alineo.fence"
	DefaultDLQSubject          = "alineo.dlq.ledger"
	DefaultStoreDir            = ".alineo/nats"
	DefaultDupeWindow          = 2 * time.Minute
	defaultOpTimeout           = 10 * time.Second
	fenceSubjectToken          = "fence"
	headerWriter               = "Alineo-Writer"
	natsTTLHeader              = "Nats-TTL"
	natsTTLNever               = "never"
	natsExpectedSubjSeq        = "Nats-Expected-Last-Subject-Sequence"
	natsExpectedSubjSeqSubject = "Nats-Expected-Last-Subject-Sequence-Subject"
)

// Message headers.
const (
	// HeaderName carries the entry's session name, percent-encoded
	// (url.PathEscape), on every ledger message.
	HeaderName = "Alineo-Name"
	// HeaderTraceParent carries the W3C trace context of the span the entry
	// was written under (events.Entry.Trace), when it has one, so a reader
	// (a projector's apply span) can link to the exec that wrote it.
	HeaderTraceParent = "traceparent"
	// HeaderDLQReason, HeaderDLQSubject and HeaderDLQSeq say why a parked
	// message was parked, and where it was in the ledger stream.
	HeaderDLQReason  = "Alineo-Dlq-Reason"
	HeaderDLQSubject = "Alineo-Dlq-Subject"
	HeaderDLQSeq     = "Alineo-Dlq-Seq"
)

// Config configures Open. The zero value is valid: an embedded server storing
// under ./.alineo/nats, the stream ALINEO_LEDGER on alineo.ledger.>, one
// replica, no retention limit.
type Config struct {
	// URL is the NATS server to connect to (NATS_URL). Empty starts an embedded
	// server with JetStream in StoreDir.
	URL string
	// Conn, when set, is used instead of URL; Close does not close it.
	Conn *nats.Conn
	// Options are added to the connection to URL: credentials
	// (nats.UserCredentials, nats.Nkey, nats.UserInfo, nats.Token) and TLS
	// (nats.RootCAs, nats.ClientCert), as a NATS cluster of a fleet asks.
	Options []nats.Option
	// StoreDir is the embedded server's JetStream directory. Default ./.alineo/nats.
	StoreDir string
	// Stream is the ledger stream's name. Default ALINEO_LEDGER.
	Stream string
	// SubjectPrefix is the prefix of ledger subjects. Default alineo.ledger.
	SubjectPrefix string
	// FencePrefix is the prefix of the per-sandbox writer fences, stored in the
	// same stream. Default alineo.fence.
	FencePrefix string
	// DLQSubject is where projectors park messages they cannot decode. It must
	// not be a ledger subject. Default alineo.dlq.ledger.
	DLQSubject string
	// Replicas is the streams' replica count (1..5) when Open creates them;
	// 0 means 1. An existing stream keeps its own unless UpdateStreams.
	Replicas int
	// MaxAge, MaxBytes and MaxMsgs limit the stream Open creates (limits
	// retention, oldest messages go first); zero means unlimited. An existing
	// stream keeps its own unless UpdateStreams.
	MaxAge   time.Duration
	MaxBytes int64
	MaxMsgs  int64
	// UpdateStreams applies Replicas, the limits above and the ledger
	// stream's direct gets (AllowDirect, which replays read with) to streams
	// that exist already: an operator's explicit change. Without it, a
	// command that opens the bus (a read-only status or verify among them)
	// never changes an existing stream's replicas, retention or direct gets.
	UpdateStreams bool
	// DuplicateWindow is how long message ids are remembered. Default 2 min.
	DuplicateWindow time.Duration
	// SetupTimeout bounds how long Open keeps retrying the creation of its
	// streams while the cluster cannot place them (a peer offline, a meta
	// leader being elected). Default 30 s.
	SetupTimeout time.Duration
	// Logger receives operational logs. Default slog.Default().
	Logger *slog.Logger
}

func (c Config) withDefaults() (Config, error) {
	if c.StoreDir == "" {
		c.StoreDir = DefaultStoreDir
	}
	if c.Stream == "" {
		c.Stream = DefaultStream
	}
	if c.SubjectPrefix == "" {
		c.SubjectPrefix = events.DefaultSubjectPrefix
	}
	if c.FencePrefix == "" {
		c.FencePrefix = DefaultFencePrefix
	}
	if c.DLQSubject == "" {
		c.DLQSubject = DefaultDLQSubject
	}
	if c.DuplicateWindow == 0 {
		c.DuplicateWindow = DefaultDupeWindow
	}
	if c.SetupTimeout == 0 {
		c.SetupTimeout = 30 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	switch {
	case c.Replicas < 0 || c.Replicas > 5:
		return c, fmt.Errorf("%w: replicas %d, want 1..5", ErrInvalidConfig, c.Replicas)
	case c.SetupTimeout < 0:
		return c, fmt.Errorf("%w: negative setup timeout", ErrInvalidConfig)
	case c.MaxAge < 0 || c.MaxBytes < 0 || c.MaxMsgs < 0:
		return c, fmt.Errorf("%w: negative retention limit", ErrInvalidConfig)
	case strings.ContainsAny(c.SubjectPrefix, "*> ") || strings.ContainsAny(c.FencePrefix, "*> "):
		return c, fmt.Errorf("%w: subject prefixes must be literal", ErrInvalidConfig)
	case c.SubjectPrefix == c.FencePrefix || strings.HasPrefix(c.FencePrefix+".", c.SubjectPrefix+".") ||
		strings.HasPrefix(c.SubjectPrefix+".", c.FencePrefix+"."):
		return c, fmt.Errorf("%w: fence prefix %q overlaps subject prefix %q", ErrInvalidConfig, c.FencePrefix, c.SubjectPrefix)
	case strings.HasPrefix(c.DLQSubject, c.SubjectPrefix+".") || strings.HasPrefix(c.DLQSubject, c.FencePrefix+"."):
		return c, fmt.Errorf("%w: dead-letter subject %q is inside the ledger stream", ErrInvalidConfig, c.DLQSubject)
	}
	return c, nil
}

// Bus is a connection to NATS with the ledger stream in place. Safe for
// concurrent use.
type Bus struct {
	cfg     Config
	nc      *nats.Conn
	ownConn bool
	srv     *server.Server
	lock    *storeLock // the embedded server's claim on its store directory
	// localURL is the embedded server's URL with its token (empty for a
	// server Open did not start).
	localURL string
	js       jetstream.JetStream
	stream   jetstream.Stream
	// direct is the stream's AllowDirect as Open found or set it: reads
	// use batched direct gets, else an ordered consumer.
	direct bool
}

// Open connects to cfg.URL (or starts the embedded server when it is empty and
// no Conn is given) and creates or updates the ledger stream. It is idempotent:
// several processes may Open the same server at once.
func Open(ctx context.Context, cfg Config) (*Bus, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	b := &Bus{cfg: cfg}
	switch {
	case cfg.Conn != nil:
		b.nc = cfg.Conn
	default:
		url := cfg.URL
		opts := append([]nats.Option{nats.Name("alineo-bus"), nats.MaxReconnects(-1),
			nats.ReconnectWait(250 * time.Millisecond)}, cfg.Options...)
		if url == "" {
			srv, lock, local, err := startEmbedded(cfg.StoreDir)
			if err != nil {
				return nil, err
			}
			b.srv, b.lock, b.localURL = srv, lock, local
			url = local
		}
		nc, err := nats.Connect(url, opts...)
		if err != nil {
			b.shutdownServer()
			return nil, fmt.Errorf("connect %s: %w", url, err)
		}
		b.nc, b.ownConn = nc, true
	}
	b.js, err = jetstream.New(b.nc)
	if err != nil {
		b.Close()
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	if err := b.ensureStream(ctx); err != nil {
		b.Close()
		return nil, err
	}
	if err := b.ensureDLQ(ctx); err != nil {
		b.Close()
		return nil, err
	}
	return b, nil
}

// StreamConfig returns the ledger stream's configuration as Open applies it.
func (b *Bus) StreamConfig() jetstream.StreamConfig {
	c := b.cfg
	sc := jetstream.StreamConfig{
		Name:        c.Stream,
		Description: "alineo ledger: every sandbox event, and writer fences",
		Subjects:    []string{c.SubjectPrefix + ".>", c.FencePrefix + ".>"},
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		Discard:     jetstream.DiscardOld,
		Replicas:    max(c.Replicas, 1),
		MaxAge:      c.MaxAge,
		MaxBytes:    -1,
		MaxMsgs:     -1,
		Duplicates:  c.DuplicateWindow,
		// Direct gets: replays read a session in batches of direct gets,
		// much faster than an ordered consumer (read.go). Any replica
		// answers them, possibly a stale one, so the reads that must see
		// the leader's state (fences, a subject's last sequence) ask the
		// leader's STREAM.MSG.GET explicitly (LastMsg, Msg), never through
		// jetstream.Stream's GetMsg and GetLastMsgForSubject, which turn
		// into direct gets once the stream allows them.
		AllowDirect: true,
		AllowMsgTTL: true,
	}
	if c.MaxAge > 0 && sc.Duplicates > c.MaxAge {
		sc.Duplicates = c.MaxAge // the server refuses a window longer than MaxAge
	}
	if c.MaxBytes > 0 {
		sc.MaxBytes = c.MaxBytes
	}
	if c.MaxMsgs > 0 {
		sc.MaxMsgs = c.MaxMsgs
	}
	return sc
}

func (b *Bus) ensureStream(ctx context.Context) error {
	st, err := b.createStream(ctx, b.StreamConfig())
	b.stream = st
	if st != nil {
		b.direct = st.CachedInfo().Config.AllowDirect
	}
	return err
}

// keepExisting copies into sc the replicas, retention limits and
// AllowDirect of the stream of that name if it exists, unless
// Config.UpdateStreams or it does not exist yet: what Open creates or
// updates then changes nothing an operator set. An existing stream without
// direct gets keeps them off (processes of an older release may still read
// its fences through jetstream's GetLastMsgForSubject, which would then ask
// any replica) and is read with an ordered consumer; UpdateStreams turns
// them on.
func (b *Bus) keepExisting(ctx context.Context, sc *jetstream.StreamConfig) error {
	if b.cfg.UpdateStreams {
		return nil
	}
	rctx, cancel := opCtx(ctx)
	defer cancel()
	st, err := b.js.Stream(rctx, sc.Name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	old := st.CachedInfo().Config
	sc.Replicas, sc.MaxAge, sc.MaxBytes, sc.MaxMsgs, sc.Duplicates = old.Replicas, old.MaxAge, old.MaxBytes, old.MaxMsgs, old.Duplicates
	sc.AllowDirect = old.AllowDirect
	return nil
}

// createStream creates or updates the stream sc, retrying for up to
// Config.SetupTimeout while the cluster cannot do it yet: no meta leader, no
// suitable peers for placement (a peer offline), a request timed out. An error
// the server gives for the request itself (a bad config, a conflict with an
// existing stream) is returned at once.
func (b *Bus) createStream(ctx context.Context, sc jetstream.StreamConfig) (jetstream.Stream, error) {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.SetupTimeout)
	defer cancel()
	wait := 100 * time.Millisecond
	for {
		err := b.keepExisting(ctx, &sc)
		var st jetstream.Stream
		if err == nil {
			rctx, rcancel := opCtx(ctx)
			st, err = b.js.CreateOrUpdateStream(rctx, sc)
			rcancel()
		}
		if err == nil {
			return st, nil
		}
		if !retryableSetup(err) || ctx.Err() != nil {
			return nil, fmt.Errorf("create or update stream %s: %w", sc.Name, err)
		}
		b.cfg.Logger.Warn("bus: stream not created yet; retrying", "stream", sc.Name, "err", err, "in", wait)
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("create or update stream %s: %w (last: %w)", sc.Name, ctx.Err(), err)
		case <-time.After(wait):
		}
		wait = min(2*wait, 2*time.Second)
	}
}

// JetStream error codes (nats-server's errors.json) that jetstream does not name.
const (
	errCodeNoSuitablePeers     jetstream.ErrorCode = 10005 // JSClusterNoPeersErrF
	errCodeClusterNotAvailable jetstream.ErrorCode = 10008 // JSClusterNotAvailErr
	errCodeNoMetaLeader        jetstream.ErrorCode = 10009 // JSClusterNotLeaderErr
	errCodeDuplicateInProcess  jetstream.ErrorCode = 10158 // JSStreamDuplicateMessageConflict
)

// retryableSetup reports whether a stream creation error may go away by
// itself: the cluster is not ready (placement, no leader, timeouts), as
// opposed to an answer about the request.
func retryableSetup(err error) bool {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return true // a timeout, a lost connection: nothing was decided
	}
	switch apiErr.ErrorCode {
	case errCodeNoSuitablePeers, errCodeNoMetaLeader, errCodeClusterNotAvailable:
		return true
	}
	return apiErr.Code >= 500
}

// DLQStream is the name of the stream that keeps parked messages: the ledger
// stream's name plus _DLQ, on Config.DLQSubject.
func (b *Bus) DLQStream() string { return b.cfg.Stream + "_DLQ" }

func (b *Bus) ensureDLQ(ctx context.Context) error {
	_, err := b.createStream(ctx, jetstream.StreamConfig{
		Name:        b.DLQStream(),
		Description: "alineo: ledger messages projectors could not decode",
		Subjects:    []string{b.cfg.DLQSubject},
		Retention:   jetstream.LimitsPolicy,
		Storage:     jetstream.FileStorage,
		Replicas:    max(b.cfg.Replicas, 1),
		MaxAge:      30 * 24 * time.Hour,
	})
	return err
}

// Config returns the configuration in effect, defaults filled in.
func (b *Bus) Config() Config { return b.cfg }

// Conn returns the NATS connection.
func (b *Bus) Conn() *nats.Conn { return b.nc }

// JetStream returns the JetStream context used for setup and reads.
func (b *Bus) JetStream() jetstream.JetStream { return b.js }

// Stream returns the ledger stream handle.
func (b *Bus) Stream() jetstream.Stream { return b.stream }

// ClientURL returns the URL of the connected server, any credentials in it
// redacted: for logs.
func (b *Bus) ClientURL() string {
	u, err := url.Parse(b.nc.ConnectedUrl())
	if err != nil {
		return b.nc.ConnectedUrlRedacted()
	}
	u.User = nil // a token, or a user and password
	return u.String()
}

// LocalURL returns the URL, with its token, of the embedded server Open
// started, for a process of this host that connects to it (also written,
// mode 0600, to StoreDir/nats.url); "" when Open connected to a server.
func (b *Bus) LocalURL() string { return b.localURL }

// LastSeq returns the stream's last sequence (0 when empty).
func (b *Bus) LastSeq(ctx context.Context) (uint64, error) {
	ctx, cancel := opCtx(ctx)
	defer cancel()
	si, err := b.stream.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("stream info: %w", err)
	}
	return si.State.LastSeq, nil
}

// LedgerFilter returns the wildcard subject of every ledger entry.
func (b *Bus) LedgerFilter() string { return b.cfg.SubjectPrefix + ".>" }

// Close closes the connection it opened and shuts the embedded server down.
// It is idempotent.
func (b *Bus) Close() error {
	if b.ownConn && b.nc != nil {
		b.nc.Close()
	}
	b.shutdownServer()
	return nil
}

func (b *Bus) shutdownServer() {
	if b.srv != nil {
		b.srv.Shutdown()
		b.srv.WaitForShutdown()
	}
	b.lock.release() // after the server has let go of its files
	b.lock = nil
}

// opCtx bounds one request to the server by defaultOpTimeout (or ctx's
// earlier deadline): a request lost with a dying server must not hang until a
// long caller deadline.
func opCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, defaultOpTimeout)
}

// urlFile is the file, in the embedded server's store directory, that holds
// its URL with its token (mode 0600): how another process of this host, run
// by the same user, connects to it.
const urlFile = "nats.url"

// startEmbedded starts a NATS server with JetStream storing under dir,
// listening on a loopback port and requiring a token generated for this
// run: no other local user reaches the ledger or the jobs. It returns the
// server, its claim on dir and its URL with the token, which it also writes
// to dir/nats.url. A store directory has one server at a time: while
// another process's server holds dir, it fails with a *StoreInUseError.
func startEmbedded(dir string) (*server.Server, *storeLock, string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, nil, "", fmt.Errorf("embedded nats store dir: %w", err)
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return nil, nil, "", fmt.Errorf("embedded nats store dir: %w", err)
	}
	lock, err := lockStore(abs)
	if err != nil {
		return nil, nil, "", err
	}
	var tok [24]byte
	if _, err := rand.Read(tok[:]); err != nil {
		lock.release()
		return nil, nil, "", fmt.Errorf("embedded nats token: %w", err)
	}
	token := hex.EncodeToString(tok[:])
	opts := &server.Options{
		ServerName:    "alineo-embedded",
		Host:          "127.0.0.1",
		Port:          server.RANDOM_PORT,
		JetStream:     true,
		StoreDir:      abs,
		NoSigs:        true,
		NoLog:         true,
		MaxPayload:    8 << 20, // entries with 1 MiB of output fit
		Authorization: token,
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		lock.release()
		return nil, nil, "", fmt.Errorf("embedded nats: %w", err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		srv.WaitForShutdown()
		lock.release()
		return nil, nil, "", errors.New("embedded nats: not ready after 10s")
	}
	u, err := url.Parse(srv.ClientURL())
	if err != nil {
		srv.Shutdown()
		srv.WaitForShutdown()
		lock.release()
		return nil, nil, "", fmt.Errorf("embedded nats: %w", err)
	}
	u.User = url.User(token)
	local := u.String()
	if err := writePrivate(filepath.Join(abs, urlFile), local+"\n"); err != nil {
		srv.Shutdown()
		srv.WaitForShutdown()
		lock.release()
		return nil, nil, "", fmt.Errorf("embedded nats: %w", err)
	}
	return srv, lock, local, nil
}

// writePrivate writes s to path, mode 0600 (the file is replaced, never
// widened).
func writePrivate(path, s string) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(s), 0o600); err != nil {
		return err
	}
	if err := os.Chmod(tmp, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
