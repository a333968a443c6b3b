package soak

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	_ "modernc.org/sqlite" // reads a host's own checkpoint store (Config.LocalStorage)
)

// The checkpoint stores' table of checkpoints (checkpoints/sqlite's and
// checkpoints/postgres's: one schema) and the JSON of a checkpoint's body
// as far as its blobs go (the contract's SandboxCheckpoint: files[].kind,
// files[].blobKey, artifacts[].blobKey). The soak reads them as an
// auditor would, without the stores' code.
const checkpointsQuery = `SELECT id, body FROM alineo_checkpoints ORDER BY seq`

type checkpointBody struct {
	Files []struct {
		Kind    string `json:"kind"`
		BlobKey string `json:"blobKey"`
	} `json:"files"`
	Artifacts []struct {
		BlobKey string `json:"blobKey"`
	} `json:"artifacts"`
}

// blobKeys returns the blob keys a checkpoint's body references: one per
// file entry and per artifact.
func blobKeys(body []byte) ([]string, error) {
	var b checkpointBody
	if err := json.Unmarshal(body, &b); err != nil {
		return nil, err
	}
	var keys []string
	for _, f := range b.Files {
		if f.Kind == "file" {
			keys = append(keys, f.BlobKey)
		}
	}
	for _, a := range b.Artifacts {
		keys = append(keys, a.BlobKey)
	}
	return keys, nil
}

// rowsOf decodes (id, body) rows into store's checkpoints.
func rowsOf(store string, next func() bool, scan func(id, body *string) error) ([]CheckpointRefs, error) {
	var out []CheckpointRefs
	for next() {
		var id, body string
		if err := scan(&id, &body); err != nil {
			return out, err
		}
		keys, err := blobKeys([]byte(body))
		if err != nil {
			return out, fmt.Errorf("checkpoint %s: %w", id, err)
		}
		out = append(out, CheckpointRefs{Store: store, ID: id, Keys: keys})
	}
	return out, nil
}

// postgresCheckpoints lists the checkpoints of the shared store at dsn.
func postgresCheckpoints(ctx context.Context, dsn string) ([]CheckpointRefs, error) {
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	conn, err := pgx.Connect(cctx, dsn)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	rows, err := conn.Query(cctx, checkpointsQuery)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out, err := rowsOf("shared", rows.Next, func(id, body *string) error { return rows.Scan(id, body) })
	if err == nil {
		err = rows.Err()
	}
	return out, err
}

// sqliteCheckpoints lists the checkpoints of a host's own store (the
// SQLite file its sandboxd keeps), read-only.
func sqliteCheckpoints(ctx context.Context, store, path string) ([]CheckpointRefs, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, err
	}
	db, err := sql.Open("sqlite", "file:"+path+"?mode=ro&_pragma=busy_timeout(10000)")
	if err != nil {
		return nil, err
	}
	defer db.Close()
	rows, err := db.QueryContext(ctx, checkpointsQuery)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out, err := rowsOf(store, rows.Next, func(id, body *string) error { return rows.Scan(id, body) })
	if err == nil {
		err = rows.Err()
	}
	return out, err
}

// listBlobs returns the blob keys stored under dir: the names of its
// regular files (a blob's object is named after its key, below
// sha256/<first two digits>/), temporary directories (a dot first)
// excluded. dir is a bucket of the S3 server (which serves a directory,
// each bucket a subdirectory and each object a file) or a host's own blob
// folder.
func listBlobs(dir string) (map[string]bool, error) {
	out := map[string]bool{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && p != dir {
				return nil // removed while listed
			}
			return err
		}
		if strings.HasPrefix(d.Name(), ".") && p != dir {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.Type().IsRegular() {
			out[d.Name()] = true
		}
		return nil
	})
	return out, err
}

// observeStorage lists the checkpoints of the hosts' stores, then their
// buckets (in that order: a blob is stored before the checkpoint naming
// it). A checkpoint whose blob is missing is looked for again, with the
// bucket listed again: one deleted meanwhile (and its blobs collected) is
// no problem.
func (h *harness) observeStorage(ctx context.Context, o *Observation) {
	type store struct {
		name  string
		list  func() ([]CheckpointRefs, error)
		blobs string
	}
	var stores []store
	if h.cfg.LocalStorage {
		for _, host := range h.f.Hosts {
			snap := filepath.Join(host.Data, "snapshots")
			stores = append(stores, store{host.Name, func() ([]CheckpointRefs, error) {
				return sqliteCheckpoints(ctx, host.Name, filepath.Join(snap, "checkpoints.db"))
			}, filepath.Join(snap, "blobs")})
		}
	} else {
		stores = append(stores, store{"shared", func() ([]CheckpointRefs, error) {
			return postgresCheckpoints(ctx, h.f.CheckpointsDSN)
		}, filepath.Join(h.f.S3Root, S3Bucket)})
	}
	o.Blobs = map[string]map[string]bool{}
	for _, s := range stores {
		cps, err := s.list()
		if err != nil {
			o.BlobsErr = append(o.BlobsErr, fmt.Sprintf("list the checkpoints of %s: %v", s.name, err))
			continue
		}
		blobs, err := listBlobs(s.blobs)
		if err != nil {
			o.BlobsErr = append(o.BlobsErr, fmt.Sprintf("list the blobs of %s: %v", s.name, err))
			continue
		}
		if missing(cps, blobs) {
			again, err := s.list()
			if err == nil {
				blobs, err = listBlobs(s.blobs)
			}
			if err == nil {
				cps = again
			}
		}
		o.Checkpoints = append(o.Checkpoints, cps...)
		o.Blobs[s.name] = blobs
	}
}

// missing reports whether a checkpoint of cps references a blob not in blobs.
func missing(cps []CheckpointRefs, blobs map[string]bool) bool {
	for _, c := range cps {
		for _, k := range c.Keys {
			if !blobs[k] {
				return true
			}
		}
	}
	return false
}

// observeHosts collects the multi-host checks' observations: the hosts,
// the executors' hosts, the losses, the stores.
func (h *harness) observeHosts(ctx context.Context, o *Observation) {
	o.ExecutorHosts = map[string]string{}
	for _, host := range h.f.Hosts {
		o.Hosts = append(o.Hosts, host.Name)
		for _, e := range host.Executors {
			o.ExecutorHosts[e.Name] = host.Name
		}
	}
	o.HostLosses = h.sched.hostLosses()
	h.observeStorage(ctx, o)
}
