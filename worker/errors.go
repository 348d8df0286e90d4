package worker

import (
	"fmt"

	"github.com/fenceq/fenceq/broker"
)

// ErrInvalidConfig is wrapped by every [ConfigError]. It wraps
// broker.ErrInvalid in turn, so errors.Is(err, broker.ErrInvalid) holds
// for every argument fenceq refuses, in whichever package.
var ErrInvalidConfig = fmt.Errorf("invalid worker config: %w", broker.ErrInvalid)

// ConfigError reports a Config that New refuses. Nothing was started.
type ConfigError struct {
	// Field is the Config field at fault: "Concurrency", "Queues",
	// "Retention.Dead", "Periodic", ...
	Field string
	// Reason says what is wrong and what would be right; empty when Err
	// says it all.
	Reason string
	// Err is the error behind the refusal, such as a *broker.ValidationError
	// for a queue name or a periodic job; nil when Reason says it all.
	Err error
}

func (e *ConfigError) Error() string {
	switch {
	case e.Err == nil:
		return "fenceq: worker config: " + e.Reason
	case e.Reason == "":
		return "fenceq: worker config: " + e.Err.Error()
	}
	return "fenceq: worker config: " + e.Reason + ": " + e.Err.Error()
}

// Unwrap answers ErrInvalidConfig and the error behind the refusal.
func (e *ConfigError) Unwrap() []error {
	if e.Err == nil {
		return []error{ErrInvalidConfig}
	}
	return []error{ErrInvalidConfig, e.Err}
}

// invalid is a ConfigError of field whose reason is format's.
func invalid(field, format string, args ...any) error {
	return &ConfigError{Field: field, Reason: fmt.Sprintf(format, args...)}
}
