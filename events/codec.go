package events

import (
	"encoding/json"
	"fmt"
)

// Marshal encodes e as the JSON object the bus carries. It validates e first.
func Marshal(e Entry) ([]byte, error) {
	if err := Validate(e); err != nil {
		return nil, err
	}
	return json.Marshal(e)
}

// Unmarshal decodes and validates an entry encoded by Marshal. Any error wraps
// ErrInvalidEntry; it never panics, whatever the input.
func Unmarshal(b []byte) (Entry, error) {
	var e Entry
	if err := json.Unmarshal(b, &e); err != nil {
		return Entry{}, &ValidationError{Field: "entry", Reason: "does not decode", Err: fmt.Errorf("%w", err)}
	}
	if err := Validate(e); err != nil {
		return Entry{}, err
	}
	return e, nil
}
