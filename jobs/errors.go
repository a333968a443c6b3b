package jobs

import (
	"errors"
	"fmt"
)

var (
	// ErrInvalidSpec is wrapped by every *SpecError.
	ErrInvalidSpec = errors.New("invalid job spec")
	// ErrNotFound is returned for an unknown job id.
	ErrNotFound = errors.New("job not found")
	// ErrDrained is returned by Runner.Run when it stopped early because its
	// Drain channel closed; the job is to be handed back.
	ErrDrained = errors.New("job drained before its last step")
	// ErrResumeUnavailable is returned when a job must be resumed from a
	// checkpoint and the Runner has no way to resume (Runner.Resume is nil).
	ErrResumeUnavailable = errors.New("resume from a checkpoint is not available")
	// ErrInvalidConfig reports a Queue or Worker configuration that cannot work.
	ErrInvalidConfig = errors.New("invalid jobs config")
	// ErrCanceled is wrapped by the error that stops a job canceled with
	// Queue.Cancel (the Worker's Runner.Stop returns it before a step).
	ErrCanceled = errors.New("job canceled")
	// ErrSettled is returned by Queue.Cancel for a job that succeeded,
	// failed or was canceled already.
	ErrSettled = errors.New("job already settled")
	// ErrNotRetryable is returned by Queue.Retry for a job that neither
	// failed nor was canceled, or that was retried already.
	ErrNotRetryable = errors.New("job cannot be retried")
	// ErrSpecUnavailable is returned by Queue.Spec and Queue.Retry for a job
	// whose spec was not kept (submitted before the queue kept specs).
	ErrSpecUnavailable = errors.New("job spec not kept")
)

// SpecError says what is wrong with a job spec and where. Path is a JSON path
// such as "steps[2].exec.timeout" ("" for the document itself); a document
// that is not JSON has the Line and Column (1-based, in characters) of its
// first error instead. It unwraps to ErrInvalidSpec.
type SpecError struct {
	Path   string
	Reason string
	// Line and Column locate a JSON syntax error; 0 otherwise.
	Line, Column int
}

func (e *SpecError) Error() string {
	switch {
	case e.Path != "":
		return "job spec: " + e.Path + ": " + e.Reason
	case e.Line > 0:
		return fmt.Sprintf("job spec: line %d, column %d: %s", e.Line, e.Column, e.Reason)
	}
	return "job spec: " + e.Reason
}

// Unwrap returns ErrInvalidSpec.
func (e *SpecError) Unwrap() error { return ErrInvalidSpec }

// StepError reports the step a job failed in. Index is the step's position in
// Spec.Steps (0-based); Err is the SDK's error (a *alineo.CommandError for a
// strict exec that exited non-zero).
type StepError struct {
	Index int
	Kind  StepKind
	Err   error
}

func (e *StepError) Error() string {
	return fmt.Sprintf("step %d (%s): %v", e.Index+1, e.Kind, e.Err)
}

// Unwrap returns the step's error.
func (e *StepError) Unwrap() error { return e.Err }
