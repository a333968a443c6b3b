package projections

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/alineo-labs/alineo/bus"
)

// One projector applies a consumer (a projection's partition) at a time.
// Each runtime holds the consumer's key in the OwnersBucket key-value
// bucket while it runs: it creates the key (which fails while another holds
// it), renews it every OwnerTTL/3, and deletes it when it stops. A second
// runtime started on the same partition waits, applying nothing, until the
// key is gone: deleted by a clean stop, or expired OwnerTTL after its holder
// died or lost its link. A holder whose renewal fails stops its session at
// once, before the key can expire and another take over.

// OwnersBucket is the key-value bucket of the consumers' owners.
const OwnersBucket = "ALINEO_PROJECTION_OWNERS"

// DefaultOwnerTTL is how long a dead owner's claim outlives it.
const DefaultOwnerTTL = 10 * time.Second

// owner is a runtime's claim on its consumer.
type owner struct {
	kv  jetstream.KeyValue
	key string
	id  string
	rev uint64
}

// ownerID names this runtime in the bucket (host, pid and a random part),
// so that a waiting one can say who holds the partition.
func ownerID() string {
	host, _ := os.Hostname()
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s/%d/%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// ownersBucket opens the bucket, creating it (with the ledger stream's
// replicas) if it does not exist; an existing one is used as it is.
func (r *Runtime) ownersBucket(ctx context.Context) (jetstream.KeyValue, error) {
	js := r.Bus.JetStream()
	kv, err := js.KeyValue(ctx, OwnersBucket)
	if err == nil || !errors.Is(err, jetstream.ErrBucketNotFound) {
		return kv, err
	}
	replicas := max(r.Bus.Stream().CachedInfo().Config.Replicas, 1)
	kv, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: OwnersBucket,
		Description: "alineo: which projector applies each projection partition",
		History:     1, TTL: r.OwnerTTL, Storage: jetstream.FileStorage, Replicas: replicas})
	if errors.Is(err, jetstream.ErrBucketExists) {
		return js.KeyValue(ctx, OwnersBucket)
	}
	return kv, err
}

// own blocks until this runtime holds its consumer's key, or ctx ends.
func (r *Runtime) own(ctx context.Context) (*owner, error) {
	var kv jetstream.KeyValue
	if err := r.retry(ctx, "owners bucket", func() (err error) {
		kv, err = r.ownersBucket(ctx)
		return err
	}); err != nil {
		return nil, err
	}
	o := &owner{kv: kv, key: ownerKey(r.key), id: r.ownerID}
	logged := ""
	for {
		rev, err := kv.Create(ctx, o.key, []byte(o.id))
		if err == nil {
			o.rev = rev
			r.waiting.Store(false)
			if logged != "" {
				r.Logger.Info("projection: took the partition over", "projection", r.Name, "consumer", r.key, "from", logged)
			}
			return o, nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) {
			r.errs.Add(1)
			r.Logger.Warn("projection: claim the partition", "projection", r.Name, "consumer", r.key, "err", err)
		} else if e, gerr := kv.Get(ctx, o.key); gerr == nil && string(e.Value()) != logged {
			logged = string(e.Value())
			r.Logger.Warn("projection: another projector applies this partition; waiting until it stops or its claim expires",
				"projection", r.Name, "consumer", r.key, "holder", logged, "ttl", r.OwnerTTL)
		}
		r.waiting.Store(true)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(r.OwnerTTL / 4):
		}
	}
}

// keep renews o every OwnerTTL/3 until ctx ends; a renewal that fails (the
// key was taken, or not renewed in time) calls lost at once.
func (r *Runtime) keep(ctx context.Context, o *owner, lost func(error)) {
	t := time.NewTicker(r.OwnerTTL / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rctx, cancel := context.WithTimeout(ctx, r.OwnerTTL/3)
		rev, err := o.kv.Update(rctx, o.key, []byte(o.id), o.rev)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			lost(fmt.Errorf("renew the claim on %s: %w", o.key, err))
			return
		}
		o.rev = rev
	}
}

// release deletes o's key if o still holds it.
func (o *owner) release() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = o.kv.Delete(ctx, o.key, jetstream.LastRevision(o.rev))
}

// ownerKey is a consumer key as a bucket key (letters, digits, - _ / = .).
func ownerKey(consumer string) string {
	out := []byte(consumer)
	for i, c := range out {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_', c == '=':
		default:
			out[i] = '_'
		}
	}
	return string(out)
}

// PartitionOwner returns who holds the claim on the consumer key (a
// partition's key, PartitionKey): the host, pid and a random part of the
// projector applying it, or "" when none does. Safe for concurrent use.
func PartitionOwner(ctx context.Context, b *bus.Bus, key string) (string, error) {
	kv, err := b.JetStream().KeyValue(ctx, OwnersBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	e, err := kv.Get(ctx, ownerKey(key))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	return string(e.Value()), nil
}
