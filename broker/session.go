package broker

import (
	"context"
	"fmt"
	"time"
)

// Sessions are the dashboard's sign-ins, kept in Redis so that every
// process serving the dashboard for one deployment sees a sign-out at
// once. A session is one key that expires with it; only a sign-in with the
// admin token makes one, so their number is bounded by sign-ins, never by
// visitors.

// maxSessionIDBytes bounds a session id (the dashboard's are 32 hex digits).
const maxSessionIDBytes = 64

// StartSession records session id as signed in for life.
func (b *Inspector) StartSession(ctx context.Context, id string, life time.Duration) error {
	if err := validSessionID(id); err != nil {
		return err
	}
	if life < time.Millisecond {
		return &ValidationError{Field: "life", Value: life.String(), Reason: "must be at least 1ms"}
	}
	if err := b.rdb.Set(ctx, b.sessionKey(id), "1", life).Err(); err != nil {
		return fmt.Errorf("fenceq: start session: %w", err)
	}
	return nil
}

// SessionActive answers whether session id was started and has neither
// ended nor expired.
func (b *Inspector) SessionActive(ctx context.Context, id string) (bool, error) {
	if err := validSessionID(id); err != nil {
		return false, err
	}
	n, err := b.rdb.Exists(ctx, b.sessionKey(id)).Result()
	if err != nil {
		return false, fmt.Errorf("fenceq: read session: %w", err)
	}
	return n == 1, nil
}

// EndSession ends session id, for every process that checks it. Ending
// one that is not active changes nothing.
func (b *Inspector) EndSession(ctx context.Context, id string) error {
	if err := validSessionID(id); err != nil {
		return err
	}
	if err := b.rdb.Del(ctx, b.sessionKey(id)).Err(); err != nil {
		return fmt.Errorf("fenceq: end session: %w", err)
	}
	return nil
}

func validSessionID(id string) error {
	if id == "" || len(id) > maxSessionIDBytes {
		return &ValidationError{Field: "session", Value: short(id), Reason: fmt.Sprintf("must be 1 to %d bytes", maxSessionIDBytes)}
	}
	for _, c := range []byte(id) {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || c == '-' || c == '_') {
			return &ValidationError{Field: "session", Value: short(id), Reason: "must hold only letters, digits, '-' and '_'"}
		}
	}
	return nil
}
