package jobs

import (
	"context"
	"errors"
	"net/http"
	"strings"

	"github.com/alineo-labs/alineo/opensandbox"
)

// imageReasons are the OpenSandbox status reasons (and the ends of the error
// codes) of a sandbox whose image could not be had.
var imageReasons = []string{opensandbox.ReasonImageNotFound, opensandbox.ReasonImageUnauthorized, opensandbox.ReasonImagePullFailed}

// permanent reports whether err, an attempt's failure, fails the job for
// good: another attempt, on this worker or another, would get the same
// answer, so the fleet does not retry it. Such are an invalid spec, an image
// that cannot be had (not found, unauthorized, its pull failed: a name that
// means nothing to the registry, a registry that does not answer), and a
// request the sandbox server refuses on its face (400, 422, 424). A
// cancellation or a timeout is never permanent.
func permanent(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	if errors.Is(err, ErrInvalidSpec) || errors.Is(err, opensandbox.ErrImageNotFound) ||
		errors.Is(err, opensandbox.ErrImageUnauthorized) || errors.Is(err, opensandbox.ErrImagePullFailed) {
		return true
	}
	var ae *opensandbox.APIError
	if !errors.As(err, &ae) {
		return false
	}
	for _, r := range imageReasons {
		if ae.Code == r || strings.HasSuffix(ae.Code, "::"+r) {
			return true
		}
	}
	switch ae.Status {
	case http.StatusBadRequest, http.StatusUnprocessableEntity, http.StatusFailedDependency:
		return true
	}
	return false
}
