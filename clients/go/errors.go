package fencing

import (
	"errors"
	"fmt"

	"github.com/jackc/pgconn"
)

// The SQLSTATEs of pg_fencing's refusals.
const (
	SQLStateStaleToken        = "55Z01"
	SQLStateMissingToken      = "55Z02"
	SQLStateNeverGrantedToken = "55Z03"
	SQLStateLeaseEnded        = "55Z04"
	SQLStateSessionEnded      = "55Z05"
)

// Sentinel errors, for errors.Is. The guard's refusals come as a *GuardError,
// which matches the sentinel of its SQLSTATE and unwraps to the server's
// *pgconn.PgError (errors.As), so nothing the server said is lost.
var (
	// ErrStaleToken (55Z01): the token is lower than one the row or lock has
	// seen: another holder has taken over; stop acting on this lease.
	ErrStaleToken = errors.New("pg_fencing: stale token (55Z01)")
	// ErrMissingToken (55Z02): the write did not set the table's token column.
	ErrMissingToken = errors.New("pg_fencing: missing token (55Z02)")
	// ErrNeverGrantedToken (55Z03): a token the database never granted: a
	// bug, not a lost lease.
	ErrNeverGrantedToken = errors.New("pg_fencing: token never granted (55Z03)")
	// ErrLeaseEnded (55Z04): the COMMIT of a transaction that wrote under a
	// lease which ended before it: nothing it did was kept.
	ErrLeaseEnded = errors.New("pg_fencing: lease ended before commit (55Z04)")
	// ErrSessionEnded (55Z05): an acquire in a session that had ended.
	ErrSessionEnded = errors.New("pg_fencing: session ended (55Z05)")

	// ErrLeaseLost: the lease, lock or session is known lost (expired,
	// refused, revoked, released, or no longer renewable in time). Returned
	// before anything is sent.
	ErrLeaseLost = errors.New("pg_fencing: lease lost")
	// ErrLockTimeout: the lock stayed busy for the whole wait, or was busy at
	// a try (TryLock, a wait of 0).
	ErrLockTimeout = errors.New("pg_fencing: lock busy")
)

var guardSentinels = map[string]error{
	SQLStateStaleToken:        ErrStaleToken,
	SQLStateMissingToken:      ErrMissingToken,
	SQLStateNeverGrantedToken: ErrNeverGrantedToken,
	SQLStateLeaseEnded:        ErrLeaseEnded,
	SQLStateSessionEnded:      ErrSessionEnded,
}

// GuardError is a statement the database refused on pg_fencing's account;
// it changed nothing.
type GuardError struct {
	SQLState string
	Cause    *pgconn.PgError
}

func (e *GuardError) Error() string {
	msg := fmt.Sprintf("pg_fencing: %s (SQLSTATE %s)", e.Cause.Message, e.SQLState)
	if e.Cause.Detail != "" {
		msg += ": " + e.Cause.Detail
	}
	return msg
}

// Unwrap gives the server's error: errors.As(err, &pgErr) finds it.
func (e *GuardError) Unwrap() error { return e.Cause }

// Is matches the sentinel of the error's SQLSTATE (ErrStaleToken, ...).
func (e *GuardError) Is(target error) bool {
	return target != nil && guardSentinels[e.SQLState] == target
}

// mapGuardError turns a pg_fencing refusal into a *GuardError; any other
// error comes back unchanged.
func mapGuardError(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		if _, ok := guardSentinels[pgErr.Code]; ok {
			return &GuardError{SQLState: pgErr.Code, Cause: pgErr}
		}
	}
	return err
}

// lostError is ErrLeaseLost with what was lost and why.
func lostError(what string, token Token, reason string) error {
	if token == 0 {
		return fmt.Errorf("%w: %s is no longer held: %s", ErrLeaseLost, what, reason)
	}
	return fmt.Errorf("%w: %s (token %d) is no longer held: %s", ErrLeaseLost, what, token, reason)
}
