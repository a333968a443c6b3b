package checkpoints_test

import (
	"cmp"
	"context"
	"slices"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/checkpoints"
	"github.com/alineo-labs/alineo/checkpoints/checkpointtest"
	"github.com/alineo-labs/alineo/checkpoints/memory"
)

// slowBlobs is a blob store whose listing takes a while (the clock moves on
// while it lists) and which may report a fresher modification time on Stat
// than in its listing (a host wrote the blob again meanwhile).
type slowBlobs struct {
	clock   *checkpointtest.Clock
	listFor time.Duration
	blobs   map[string]checkpoints.BlobInfo
	rewrite map[string]time.Time // Stat's answer, when set
	deleted []string
}

func (s *slowBlobs) List(context.Context) ([]checkpoints.BlobInfo, error) {
	s.clock.Advance(s.listFor)
	var out []checkpoints.BlobInfo
	for _, b := range s.blobs {
		out = append(out, b)
	}
	slices.SortFunc(out, func(a, b checkpoints.BlobInfo) int { return cmp.Compare(a.Key, b.Key) })
	return out, nil
}

func (s *slowBlobs) Delete(_ context.Context, key string) error {
	s.deleted = append(s.deleted, key)
	delete(s.blobs, key)
	return nil
}

// statBlobs is slowBlobs with Stat.
type statBlobs struct{ *slowBlobs }

func (s statBlobs) Stat(_ context.Context, key string) (checkpoints.BlobInfo, error) {
	b := s.blobs[key]
	if t, ok := s.rewrite[key]; ok {
		b.ModTime = t
	}
	return b, nil
}

// TestGCGraceCountsFromReferenceRead: a blob younger than MinAge when GC
// read the references is spared however long the listing takes afterwards.
func TestGCGraceCountsFromReferenceRead(t *testing.T) {
	ctx := context.Background()
	clock := checkpointtest.NewClock()
	s := memory.New(checkpoints.Options{Now: clock.Now})
	const minAge = time.Minute
	t0 := clock.Now()
	blobs := &slowBlobs{clock: clock, listFor: 10 * time.Minute, blobs: map[string]checkpoints.BlobInfo{
		"young": {Key: "young", ModTime: t0.Add(-minAge / 2)}, // put by a capture in flight
		"old":   {Key: "old", ModTime: t0.Add(-2 * minAge)},   // garbage
	}}
	st, err := checkpoints.GC(ctx, s, blobs, checkpoints.GCOptions{MinAge: minAge, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := blobs.deleted, []string{"old"}; !slices.Equal(got, want) {
		t.Fatalf("deleted %v, want %v (stats %+v)", got, want, st)
	}
}

// TestGCStatsBeforeDelete: a blob written again after the listing (its
// content stored anew by a capture on another host) is spared.
func TestGCStatsBeforeDelete(t *testing.T) {
	ctx := context.Background()
	clock := checkpointtest.NewClock()
	s := memory.New(checkpoints.Options{Now: clock.Now})
	old := clock.Now().Add(-time.Hour)
	inner := &slowBlobs{clock: clock, blobs: map[string]checkpoints.BlobInfo{
		"rewritten": {Key: "rewritten", ModTime: old},
		"garbage":   {Key: "garbage", ModTime: old},
	}, rewrite: map[string]time.Time{"rewritten": clock.Now()}}
	st, err := checkpoints.GC(ctx, s, statBlobs{inner}, checkpoints.GCOptions{MinAge: time.Minute, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := inner.deleted, []string{"garbage"}; !slices.Equal(got, want) || st.Spared != 1 {
		t.Fatalf("deleted %v (stats %+v), want %v and 1 spared", got, st, want)
	}
}
