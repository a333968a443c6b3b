package jobs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"time"
	"unicode/utf8"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/alineo-labs/alineo/events"
)

// Defaults of QueueConfig.
const (
	DefaultStream     = "ALINEO_JOBS"
	DefaultSubject    = "alineo.jobs"
	DefaultBucket     = "ALINEO_JOB_STATUS"
	DefaultConsumer   = "alineo-executor"
	DefaultAckWait    = 30 * time.Second
	DefaultMaxDeliver = 10
)

// QueueConfig configures OpenQueue. The zero value is valid.
type QueueConfig struct {
	// Stream is the jobs stream (work-queue retention). Default ALINEO_JOBS.
	Stream string
	// Subject is the subject jobs are published on. Default alineo.jobs.
	Subject string
	// Bucket is the KV bucket holding each job's Status. Default ALINEO_JOB_STATUS.
	Bucket string
	// SpecBucket is the KV bucket keeping each job's spec, for Retry.
	// Default ALINEO_JOB_SPECS.
	SpecBucket string
	// WorkerBucket is the KV bucket of the workers' presence records
	// (Workers). Default ALINEO_WORKERS.
	WorkerBucket string
	// Consumer is the durable consumer every worker pulls from. Default alineo-executor.
	Consumer string
	// Replicas of the stream and the bucket when OpenQueue creates them
	// (0 means 1). Existing ones keep their own: a command that opens the
	// queue never changes them unless UpdateStreams.
	Replicas int
	// UpdateStreams applies Replicas to a stream and bucket that exist
	// already: an operator's explicit change.
	UpdateStreams bool
	// AckWait is a job's lease: a job whose worker neither heartbeats nor
	// acknowledges it for this long is delivered again. Default 30 s.
	AckWait time.Duration
	// MaxDeliver bounds the deliveries of one job. Default 10.
	MaxDeliver int
}

func (c QueueConfig) withDefaults() (QueueConfig, error) {
	if c.Stream == "" {
		c.Stream = DefaultStream
	}
	if c.Subject == "" {
		c.Subject = DefaultSubject
	}
	if c.Bucket == "" {
		c.Bucket = DefaultBucket
	}
	if c.SpecBucket == "" {
		c.SpecBucket = DefaultSpecBucket
	}
	if c.WorkerBucket == "" {
		c.WorkerBucket = DefaultWorkerBucket
	}
	if c.Consumer == "" {
		c.Consumer = DefaultConsumer
	}
	if c.AckWait == 0 {
		c.AckWait = DefaultAckWait
	}
	if c.MaxDeliver == 0 {
		c.MaxDeliver = DefaultMaxDeliver
	}
	switch {
	case c.Replicas < 0 || c.Replicas > 5:
		return c, fmt.Errorf("%w: replicas %d, want 1..5", ErrInvalidConfig, c.Replicas)
	case c.AckWait < time.Second:
		return c, fmt.Errorf("%w: AckWait %v, want at least 1s", ErrInvalidConfig, c.AckWait)
	case c.MaxDeliver < 1:
		return c, fmt.Errorf("%w: MaxDeliver %d, want at least 1", ErrInvalidConfig, c.MaxDeliver)
	}
	return c, nil
}

// State is a job's state in its Status.
type State string

// Job states.
const (
	StateQueued    State = "queued"    // submitted, not yet picked up
	StateRunning   State = "running"   // a worker holds it
	StateRequeued  State = "requeued"  // handed back (drain or a transient failure); will be delivered again
	StateSucceeded State = "succeeded" // every step done
	StateFailed    State = "failed"    // a step failed, or deliveries ran out
	StateCanceled  State = "canceled"  // canceled (Queue.Cancel) before it ran, or by its worker before a step
)

// Terminal reports whether the state is final.
func (s State) Terminal() bool { return s == StateSucceeded || s == StateFailed || s == StateCanceled }

// Status is a job's status, kept in the KV bucket under its id.
type Status struct {
	ID    string `json:"id"`
	Name  string `json:"name"`
	State State  `json:"state"`
	// Attempt is the delivery being worked on (1 for the first).
	Attempt int    `json:"attempt"`
	Worker  string `json:"worker,omitempty"`
	// SandboxID and SandboxName are the session of the current attempt.
	SandboxID   string `json:"sandboxId,omitempty"`
	SandboxName string `json:"sandboxName,omitempty"`
	// Steps is the spec's step count; Done the steps finished in this attempt
	// (replayed ones included).
	Steps int `json:"steps"`
	Done  int `json:"done"`
	// Checkpoint is the last resume point: a redelivered job resumes there.
	Checkpoint *Checkpoint `json:"checkpoint,omitempty"`
	Error      string      `json:"error,omitempty"`
	// Submitter names who submitted the job (SubmitAs; the API's user, or
	// the user who retried it): the job's entries are recorded as caused by
	// JobActor(Submitter, the worker running it), across takeovers. "" when
	// unknown.
	Submitter   string `json:"submitter,omitempty"`
	SubmittedAt int64  `json:"submittedAt"` // Unix ms
	UpdatedAt   int64  `json:"updatedAt"`   // Unix ms
	// CancelRequested is set by Cancel: a job that had not started is
	// canceled at once, a running one by its worker before its next step.
	// CanceledBy names who asked (Cancel's by).
	CancelRequested bool   `json:"cancelRequested,omitempty"`
	CanceledBy      string `json:"canceledBy,omitempty"`
	// RetryOf is the job this one retries (Retry); RetriedAs the job that
	// retries this one.
	RetryOf   string `json:"retryOf,omitempty"`
	RetriedAs string `json:"retriedAs,omitempty"`
	RetriedBy string `json:"retriedBy,omitempty"`
}

// Message is the body of a job message on the jobs stream. Submitter is the
// status's: every delivery of the message, a takeover's included, knows
// whom it runs the job for.
type Message struct {
	ID        string `json:"id"`
	Spec      Spec   `json:"spec"`
	Submitter string `json:"submitter,omitempty"`
}

// JobActor is the actor (events.Entry.Actor) of the entries worker records
// running a job submitted by submitter: "alice via executor-3", or the
// worker alone when the submitter is not known. It is cut to
// events.MaxActorLen bytes.
func JobActor(submitter, worker string) string {
	a := worker
	if submitter != "" {
		a = submitter + " via " + worker
	}
	for len(a) > events.MaxActorLen {
		_, n := utf8.DecodeLastRuneInString(a)
		a = a[:len(a)-n]
	}
	return a
}

var idRE = regexp.MustCompile(`^[a-f0-9]{32}$`)

// ValidID reports whether id has the form of a job id (32 lowercase hex digits).
func ValidID(id string) bool { return idRE.MatchString(id) }

// NewID returns a new random job id.
func NewID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Queue is the jobs stream and the status bucket. Safe for concurrent use.
type Queue struct {
	js      jetstream.JetStream
	cfg     QueueConfig
	stream  jetstream.Stream
	kv      jetstream.KeyValue
	specs   jetstream.KeyValue // each job's spec, for Retry
	workers jetstream.KeyValue // the workers' presence records
}

// OpenQueue creates or updates the jobs stream and the status bucket. It is
// idempotent; several processes may open the same queue at once.
func OpenQueue(ctx context.Context, js jetstream.JetStream, cfg QueueConfig) (*Queue, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	q := &Queue{js: js, cfg: cfg}
	replicas := func(name string) (int, error) {
		if cfg.UpdateStreams && cfg.Replicas > 0 {
			return cfg.Replicas, nil
		}
		st, err := js.Stream(ctx, name)
		switch {
		case errors.Is(err, jetstream.ErrStreamNotFound):
			return max(cfg.Replicas, 1), nil
		case err != nil:
			return 0, fmt.Errorf("stream %s: %w", name, err)
		}
		return st.CachedInfo().Config.Replicas, nil // kept as it is
	}
	n, err := replicas(cfg.Stream)
	if err != nil {
		return nil, err
	}
	q.stream, err = js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:        cfg.Stream,
		Description: "alineo jobs: one message per job, removed when a worker acknowledges it",
		Subjects:    []string{cfg.Subject},
		Retention:   jetstream.WorkQueuePolicy,
		Storage:     jetstream.FileStorage,
		Replicas:    n,
		Duplicates:  2 * time.Minute,
	})
	if err != nil {
		return nil, fmt.Errorf("create or update stream %s: %w", cfg.Stream, err)
	}
	if n, err = replicas("KV_" + cfg.Bucket); err != nil {
		return nil, err
	}
	q.kv, err = openStatusBucket(ctx, js, jetstream.KeyValueConfig{
		Bucket:      cfg.Bucket,
		Description: "alineo job status",
		History:     1,
		Storage:     jetstream.FileStorage,
		Replicas:    n,
	})
	if err != nil {
		return nil, fmt.Errorf("create or update bucket %s: %w", cfg.Bucket, err)
	}
	if err := q.openControlBuckets(ctx, replicas); err != nil {
		return nil, err
	}
	return q, nil
}

// openStatusBucket opens the status bucket, creating it or updating its
// configuration when it differs, and makes every read of it go to the stream
// leader. nats.go creates a bucket with AllowDirect, which lets any replica
// answer a get: one that lags answers an old status, and a worker that gets a
// redelivered job then sees no sandbox and no checkpoint of the attempt that
// already finished it, and runs the job again from scratch (found by the soak:
// a job run twice after a NATS node restart). A handle reads AllowDirect when
// it binds, so the bucket is bound again once the stream says false.
func openStatusBucket(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	name := "KV_" + cfg.Bucket
	stream, err := js.Stream(ctx, name)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
	case err != nil:
		return nil, err
	default:
		// CreateOrUpdate turns AllowDirect on again: call it only for a
		// real change of the bucket's configuration.
		sc := stream.CachedInfo().Config
		if sc.Replicas == cfg.Replicas && sc.MaxMsgsPerSubject == int64(cfg.History) && sc.Description == cfg.Description {
			break
		}
		stream = nil
	}
	if stream == nil {
		if _, err := js.CreateOrUpdateKeyValue(ctx, cfg); err != nil {
			return nil, err
		}
		if stream, err = js.Stream(ctx, name); err != nil {
			return nil, err
		}
	}
	if sc := stream.CachedInfo().Config; sc.AllowDirect {
		sc.AllowDirect = false
		if _, err := js.UpdateStream(ctx, sc); err != nil {
			return nil, fmt.Errorf("turn direct gets off: %w", err)
		}
	}
	return js.KeyValue(ctx, cfg.Bucket) // binds with direct gets off
}

// publish publishes a job's message, retrying with backoff for
// statusRetryFor while the stream does not answer (a lost acknowledgement
// included: the message id makes a second copy a duplicate the stream drops).
// Without it, a submit that failed once left a queued status with no message,
// a job nobody would ever run.
func (q *Queue) publish(ctx context.Context, id string, body []byte) error {
	return backoff.Retry(func() error {
		_, err := q.js.Publish(ctx, q.cfg.Subject, body, jetstream.WithMsgID(id))
		if errors.Is(err, nats.ErrMaxPayload) || errors.Is(err, nats.ErrBadSubject) {
			return backoff.Permanent(err)
		}
		return err
	}, statusBackoff(ctx))
}

// Config returns the configuration in effect, defaults filled in.
func (q *Queue) Config() QueueConfig { return q.cfg }

// Submit validates spec, records its status (queued), keeps the spec (for
// Retry) and publishes it on the jobs stream with its id as the message id,
// so a retried submit is stored once. A spec that cannot be kept or a
// publish that fails for good (after retries, or when ctx ends) leaves the
// status failed with the error, not queued. Errors: *SpecError; stream and
// bucket errors. It is SubmitAs with no submitter.
func (q *Queue) Submit(ctx context.Context, spec Spec) (Status, error) {
	return q.SubmitAs(ctx, spec, "")
}

// SubmitAs is Submit on behalf of by, recorded as the job's Submitter: the
// job's entries are recorded as caused by JobActor(by, worker). by must be
// a valid actor (events.ValidateActor), else the error is a *SpecError.
func (q *Queue) SubmitAs(ctx context.Context, spec Spec, by string) (Status, error) {
	return q.submit(ctx, spec, NewID(), "", by)
}

// submit is SubmitAs of the job id, retrying the job retryOf ("" for none).
func (q *Queue) submit(ctx context.Context, spec Spec, id, retryOf, by string) (Status, error) {
	if err := spec.Validate(); err != nil {
		return Status{}, err
	}
	if err := events.ValidateActor(by); err != nil {
		return Status{}, &SpecError{Path: "submitter", Reason: err.Error()}
	}
	now := time.Now().UnixMilli()
	st := Status{ID: id, Name: spec.Name, State: StateQueued, Steps: len(spec.Steps), SubmittedAt: now, UpdatedAt: now, RetryOf: retryOf, Submitter: by}
	data, err := json.Marshal(st)
	if err != nil {
		return Status{}, err
	}
	rev, err := q.kv.Create(ctx, st.ID, data)
	if err != nil {
		return Status{}, fmt.Errorf("record job %s: %w", st.ID, err)
	}
	if err := q.keepSpec(ctx, st.ID, spec); err != nil {
		return q.abandon(ctx, st, rev, err)
	}
	body, err := json.Marshal(Message{ID: st.ID, Spec: spec, Submitter: by})
	if err == nil {
		err = q.publish(ctx, st.ID, body)
	}
	if err != nil {
		err = fmt.Errorf("publish job %s: %w", st.ID, err)
		return q.abandon(ctx, st, rev, err)
	}
	return st, nil
}

// abandon settles the queued status (revision rev) of a job whose spec could
// not be kept or whose message could not be published (cause): it is
// recorded failed with cause, so
// nothing waits on a job nobody will run, and a copy of the message that
// did reach the stream after all (its acknowledgement lost) is acknowledged
// unrun by the worker it reaches. It returns cause, joined with the error of
// the status write if that failed too. When the status moved on from rev, a
// worker holds the job (the message did land): abandon returns its status
// and no error.
func (q *Queue) abandon(ctx context.Context, st Status, rev uint64, cause error) (Status, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), statusRetryFor)
	defer cancel()
	failed := st
	failed.State, failed.Error, failed.UpdatedAt = StateFailed, "submit: "+cause.Error(), time.Now().UnixMilli()
	data, err := json.Marshal(failed)
	if err != nil {
		return Status{}, errors.Join(cause, err)
	}
	err = backoff.Retry(func() error {
		_, err := q.kv.Update(ctx, st.ID, data, rev)
		var apiErr *jetstream.APIError
		if errors.Is(err, jetstream.ErrKeyExists) || errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence {
			return backoff.Permanent(errStatusConflict) // the status moved on
		}
		return err
	}, statusBackoff(ctx))
	if errors.Is(err, errStatusConflict) {
		if cur, gerr := q.Status(ctx, st.ID); gerr == nil && cur.State != StateQueued {
			return cur, nil
		}
	}
	if err != nil {
		return Status{}, errors.Join(cause, fmt.Errorf("record job %s failed: %w", st.ID, err))
	}
	return Status{}, cause
}

// Status returns the job's status. Errors: ErrNotFound for an unknown or
// malformed id.
func (q *Queue) Status(ctx context.Context, id string) (Status, error) {
	st, _, err := q.get(ctx, id)
	return st, err
}

func (q *Queue) get(ctx context.Context, id string) (Status, uint64, error) {
	if !ValidID(id) {
		return Status{}, 0, fmt.Errorf("%w: %q", ErrNotFound, id)
	}
	e, err := q.kv.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Status{}, 0, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if err != nil {
		return Status{}, 0, fmt.Errorf("read job %s: %w", id, err)
	}
	var st Status
	if err := json.Unmarshal(e.Value(), &st); err != nil {
		return Status{}, 0, fmt.Errorf("decode job %s: %w: %w", id, errStatusCorrupt, err)
	}
	return st, e.Revision(), nil
}

// statusRetryFor bounds how long update retries a status the bucket cannot
// read or write for a while (a NATS node restarting, the stream leader
// moving): longer than a leader election, well inside a job's lease, which
// the worker's heartbeat keeps meanwhile.
const statusRetryFor = 30 * time.Second

// update applies f to the job's status with compare-and-set, retrying at once
// on a concurrent change and with backoff, for statusRetryFor, while the
// bucket is unavailable. A missing status is created from zero.
func (q *Queue) update(ctx context.Context, id string, f func(*Status)) (st Status, err error) {
	err = backoff.Retry(func() error {
		var err error
		st, err = q.casUpdate(ctx, id, f)
		if errors.Is(err, errStatusConflict) || errors.Is(err, errStatusCorrupt) {
			return backoff.Permanent(err)
		}
		return err
	}, statusBackoff(ctx))
	return st, err
}

// statusBackoff paces the retries of a status write or a job's publish while
// the stream does not answer: 50 ms doubling to 2 s, for statusRetryFor.
func statusBackoff(ctx context.Context) backoff.BackOff {
	b := backoff.NewExponentialBackOff(backoff.WithInitialInterval(50*time.Millisecond),
		backoff.WithMaxInterval(2*time.Second), backoff.WithMaxElapsedTime(statusRetryFor))
	return backoff.WithContext(b, ctx)
}

// casUpdate is update's compare-and-set, retried at once on a concurrent
// change, ten times at most.
func (q *Queue) casUpdate(ctx context.Context, id string, f func(*Status)) (Status, error) {
	for conflicts := 0; ; conflicts++ {
		st, err := q.updateOnce(ctx, id, f)
		if !errors.Is(err, errStatusConflict) || conflicts == 10 {
			return st, err
		}
	}
}

var (
	errStatusConflict = errors.New("status changed concurrently")
	errStatusCorrupt  = errors.New("corrupt status")
)

// updateOnce is one read-modify-write of update.
func (q *Queue) updateOnce(ctx context.Context, id string, f func(*Status)) (Status, error) {
	st, rev, err := q.get(ctx, id)
	switch {
	case errors.Is(err, ErrNotFound):
		st = Status{ID: id}
	case err != nil:
		return st, err
	}
	f(&st)
	st.UpdatedAt = time.Now().UnixMilli()
	data, err := json.Marshal(st)
	if err != nil {
		return st, fmt.Errorf("%w: %w", errStatusCorrupt, err)
	}
	if rev == 0 {
		_, err = q.kv.Create(ctx, id, data)
	} else {
		_, err = q.kv.Update(ctx, id, data, rev)
	}
	var apiErr *jetstream.APIError
	switch {
	case err == nil:
		return st, nil
	case errors.Is(err, jetstream.ErrKeyExists) || errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence:
		return st, fmt.Errorf("update job %s: %w: %w", id, errStatusConflict, err)
	}
	return st, fmt.Errorf("update job %s: %w", id, err)
}

// Pending returns the number of jobs in the stream not yet acknowledged.
func (q *Queue) Pending(ctx context.Context) (uint64, error) {
	si, err := q.stream.Info(ctx)
	if err != nil {
		return 0, err
	}
	return si.State.Msgs, nil
}

func (q *Queue) consumer(ctx context.Context) (jetstream.Consumer, error) {
	return q.js.CreateOrUpdateConsumer(ctx, q.cfg.Stream, jetstream.ConsumerConfig{
		Durable:       q.cfg.Consumer,
		Description:   "alineo executors",
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       q.cfg.AckWait,
		MaxDeliver:    q.cfg.MaxDeliver,
		FilterSubject: q.cfg.Subject,
		MaxAckPending: 1024,
	})
}

// List returns the statuses of the jobs in the status bucket, the most
// recently submitted first; at most limit of them when limit > 0. A status
// that cannot be read or decoded is skipped.
func (q *Queue) List(ctx context.Context, limit int) ([]Status, error) {
	keys, err := q.kv.Keys(ctx, jetstream.IgnoreDeletes())
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return []Status{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list jobs: %w", err)
	}
	out := make([]Status, 0, len(keys))
	for _, k := range keys {
		st, _, err := q.get(ctx, k)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			continue
		}
		out = append(out, st)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].SubmittedAt != out[j].SubmittedAt {
			return out[i].SubmittedAt > out[j].SubmittedAt
		}
		return out[i].ID < out[j].ID
	})
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}
