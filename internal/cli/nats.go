package cli

import (
	"flag"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/alineo-labs/alineo/bus"
)

// NATS holds the fleet settings every binary takes for its NATS connection
// and streams, beside its own --nats URL and --nats-dir: credentials (a creds
// file, an nkey seed file, or a user and password), TLS (a CA, a client
// certificate) and the streams' replicas and retention. Each flag falls back
// to the variable named in its usage.
type NATS struct {
	fs *flag.FlagSet

	creds, nkey, user, password string
	ca, cert, key               string
	replicas                    int
	maxAge                      time.Duration
	maxBytes                    int64
	envSet                      bool // a variable gave the replicas or retention
}

// NATSFlags registers the fleet settings on fs; getenv gives their defaults.
func NATSFlags(fs *flag.FlagSet, getenv func(string) string) *NATS {
	n := &NATS{fs: fs}
	fs.StringVar(&n.creds, "nats-creds", getenv("NATS_CREDS"), "NATS credentials file (JWT and nkey seed) (env NATS_CREDS)")
	fs.StringVar(&n.nkey, "nats-nkey", getenv("NATS_NKEY"), "NATS nkey seed file (env NATS_NKEY)")
	fs.StringVar(&n.user, "nats-user", getenv("NATS_USER"), "NATS user (env NATS_USER; the password from NATS_PASSWORD)")
	n.password = getenv("NATS_PASSWORD")
	fs.StringVar(&n.ca, "nats-ca", getenv("NATS_CA"), "CA certificate (PEM) that signed the NATS servers' certificates (env NATS_CA)")
	fs.StringVar(&n.cert, "nats-cert", getenv("NATS_CERT"), "client certificate (PEM) for NATS servers that verify clients (env NATS_CERT; key: --nats-key)")
	fs.StringVar(&n.key, "nats-key", getenv("NATS_KEY"), "private key (PEM) of --nats-cert (env NATS_KEY)")
	n.replicas, _ = strconv.Atoi(getenv("ALINEO_NATS_REPLICAS"))
	fs.IntVar(&n.replicas, "nats-replicas", n.replicas, "replicas of the streams this command creates (1 or 3; env ALINEO_NATS_REPLICAS); given, it also changes existing streams")
	n.maxAge, _ = time.ParseDuration(getenv("ALINEO_NATS_MAX_AGE"))
	fs.DurationVar(&n.maxAge, "nats-max-age", n.maxAge, "oldest ledger entry kept (e.g. 720h; 0 = forever; env ALINEO_NATS_MAX_AGE); given, it also changes an existing stream")
	n.maxBytes, _ = strconv.ParseInt(getenv("ALINEO_NATS_MAX_BYTES"), 10, 64)
	fs.Int64Var(&n.maxBytes, "nats-max-bytes", n.maxBytes, "ledger stream size bound in bytes (0 = none; env ALINEO_NATS_MAX_BYTES); given, it also changes an existing stream")
	n.envSet = getenv("ALINEO_NATS_REPLICAS") != "" || getenv("ALINEO_NATS_MAX_AGE") != "" || getenv("ALINEO_NATS_MAX_BYTES") != ""
	return n
}

// told reports whether the replicas or retention were given (a flag on the
// command line or its variable): only then are existing streams changed.
func (n *NATS) told() bool {
	if n == nil {
		return false
	}
	told := n.envSet
	n.fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "nats-replicas", "nats-max-age", "nats-max-bytes":
			told = true
		}
	})
	return told
}

// options returns the connection options of the credentials and TLS given.
func (n *NATS) options() ([]nats.Option, error) {
	if n == nil {
		return nil, nil
	}
	var opts []nats.Option
	auth := 0
	if n.creds != "" {
		opts = append(opts, nats.UserCredentials(n.creds))
		auth++
	}
	if n.nkey != "" {
		o, err := nats.NkeyOptionFromSeed(n.nkey)
		if err != nil {
			return nil, fmt.Errorf("--nats-nkey: %w", err)
		}
		opts = append(opts, o)
		auth++
	}
	if n.user != "" {
		opts = append(opts, nats.UserInfo(n.user, n.password))
		auth++
	}
	if auth > 1 {
		return nil, fmt.Errorf("--nats-creds, --nats-nkey and --nats-user: give one")
	}
	if n.ca != "" {
		opts = append(opts, nats.RootCAs(n.ca))
	}
	if (n.cert == "") != (n.key == "") {
		return nil, fmt.Errorf("--nats-cert and --nats-key go together")
	}
	if n.cert != "" {
		opts = append(opts, nats.ClientCert(n.cert, n.key))
	}
	return opts, nil
}

// busConfig fills cfg's connection options, replicas and retention.
func (n *NATS) busConfig(cfg *bus.Config) error {
	opts, err := n.options()
	if err != nil {
		return err
	}
	cfg.Options = opts
	if n != nil {
		if n.replicas < 0 || n.replicas > 5 {
			return fmt.Errorf("--nats-replicas %d: want 1, 3 or 5", n.replicas)
		}
		cfg.Replicas, cfg.MaxAge, cfg.MaxBytes = n.replicas, n.maxAge, n.maxBytes
		cfg.UpdateStreams = n.told()
	}
	return nil
}

// Replicas returns the replicas given (0: none) and whether existing
// streams are to be changed to them (only when given): the jobs queue's
// settings (jobs.QueueConfig's Replicas and UpdateStreams).
func (n *NATS) Replicas() (replicas int, update bool) {
	if n == nil {
		return 0, false
	}
	return n.replicas, n.told()
}
