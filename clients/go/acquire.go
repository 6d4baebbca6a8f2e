package fencing

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v4"
)

// Kind is what a lease takes of its lock.
type Kind string

const (
	Exclusive Kind = "exclusive" // fencing_acquire: one holder
	Shared    Kind = "shared"    // fencing_acquire_shared: beside other shared holders
	Permit    Kind = "permit"    // fencing_acquire_permit: one of a semaphore's permits
)

// WaitForever waits until the context ends.
const WaitForever time.Duration = math.MaxInt64

// waitSlice bounds one CALL fencing_await: a client that vanishes without
// its cancel reaching the server leaves a wait of at most this long behind.
const waitSlice = 30 * time.Second

// request is one acquire: a lease of its own (session 0) or one in a session.
type request struct {
	lockName string
	kind     Kind
	permits  int    // for Permit
	payload  string // JSON text for an exclusive lease; "" none
	holder   string // a lease of its own
	ttl      time.Duration
	session  int64
}

func (r request) describe() string {
	switch r.kind {
	case Permit:
		return fmt.Sprintf("a permit of semaphore %q", r.lockName)
	case Shared:
		return fmt.Sprintf("lock %q (shared)", r.lockName)
	}
	return fmt.Sprintf("lock %q", r.lockName)
}

func (r request) check() error {
	switch r.kind {
	case Exclusive, Shared, Permit:
	default:
		return fmt.Errorf("pg_fencing: kind must be exclusive, shared or permit, got %q", r.kind)
	}
	if (r.kind == Permit) != (r.permits > 0) {
		return fmt.Errorf("pg_fencing: permits (got %d) must be positive for a permit, and only there (kind %s)", r.permits, r.kind)
	}
	if r.payload != "" && r.kind != Exclusive {
		return fmt.Errorf("pg_fencing: a payload needs an exclusive lease, not %s", r.kind)
	}
	return nil
}

// nullable: the SQL NULL for a zero value.
func nullable[T comparable](v T) interface{} {
	var zero T
	if v == zero {
		return nil
	}
	return v
}

// attempt is the statement of one try without a wait, to run at READ
// COMMITTED (at a stricter level an acquire that meets a just-changed row
// fails with 40001).
func (r request) attempt() (string, []interface{}) {
	if r.session != 0 {
		return "SELECT fencing_session_acquire($1::bigint, $2, payload => $3::jsonb, kind => $4, permits => $5::integer)::text",
			[]interface{}{r.session, r.lockName, nullable(r.payload), string(r.kind), nullable(r.permits)}
	}
	switch r.kind {
	case Shared:
		return "SELECT fencing_acquire_shared($1, $2, $3::interval)::text",
			[]interface{}{r.lockName, r.holder, interval(r.ttl)}
	case Permit:
		return "SELECT fencing_acquire_permit($1, $2, $3::integer, $4::interval)::text",
			[]interface{}{r.lockName, r.holder, r.permits, interval(r.ttl)}
	}
	return "SELECT fencing_acquire($1, $2, $3::interval, payload => $4::jsonb)::text",
		[]interface{}{r.lockName, r.holder, interval(r.ttl), nullable(r.payload)}
}

// await is CALL fencing_await for one slice of a wait: alone, outside a
// transaction block, it commits each attempt before it sleeps and so holds
// no snapshot and no transaction id while it waits.
func (r request) await(wait time.Duration) (string, []interface{}) {
	if r.session != 0 {
		return "CALL fencing_await($1, session => $2::bigint, wait => $3::interval, kind => $4, permits => $5::integer, payload => $6::jsonb)",
			[]interface{}{r.lockName, r.session, interval(wait), string(r.kind), nullable(r.permits), nullable(r.payload)}
	}
	return "CALL fencing_await($1, $2, $3::interval, $4::interval, kind => $5, permits => $6::integer, payload => $7::jsonb)",
		[]interface{}{r.lockName, r.holder, interval(r.ttl), interval(wait), string(r.kind), nullable(r.permits), nullable(r.payload)}
}

// acquire takes the lock on conn: one attempt for a wait of 0, else CALL
// fencing_await in slices until granted, the wait is over (ErrLockTimeout)
// or ctx ends (its error; pgx then has the server cancel the CALL and
// closes conn). sent is the send time of the statement that granted.
func acquire(ctx context.Context, conn *pgx.Conn, r request, wait time.Duration) (token Token, sent time.Time, err error) {
	if err := r.check(); err != nil {
		return 0, time.Time{}, err
	}
	if wait < 0 {
		return 0, time.Time{}, fmt.Errorf("pg_fencing: wait must not be negative, got %v", wait)
	}
	var granted *string
	if wait == 0 {
		sent = time.Now()
		sql, args := r.attempt()
		err = inReadCommitted(ctx, conn, func(tx pgx.Tx) error {
			return tx.QueryRow(ctx, sql, args...).Scan(&granted)
		})
	} else {
		var end time.Time
		if wait != WaitForever {
			end = time.Now().Add(wait)
		}
		for {
			slice := waitSlice
			if !end.IsZero() {
				if left := time.Until(end); left < slice {
					slice = left
				}
			}
			if slice < time.Millisecond {
				break
			}
			sent = time.Now()
			sql, args := r.await(slice)
			// The procedure's one row is the token, NULL when the slice ran out.
			if err = conn.QueryRow(ctx, sql, args...).Scan(&granted); err != nil || granted != nil {
				break
			}
		}
	}
	if err != nil {
		if ctx.Err() != nil {
			return 0, sent, fmt.Errorf("pg_fencing: waiting for %s: %w", r.describe(), ctx.Err())
		}
		return 0, sent, fmt.Errorf("pg_fencing: acquiring %s: %w", r.describe(), mapGuardError(err))
	}
	if granted == nil {
		return 0, sent, busyError(r, wait)
	}
	token, err = parseToken(*granted)
	return token, sent, err
}

func busyError(r request, wait time.Duration) error {
	busy := " is held by another holder"
	if r.kind == Permit {
		busy = fmt.Sprintf(": every one of its %d permits is taken", r.permits)
	}
	if wait > 0 {
		return fmt.Errorf("%w: %s%s (waited %v)", ErrLockTimeout, r.describe(), busy, wait)
	}
	return fmt.Errorf("%w: %s%s", ErrLockTimeout, r.describe(), busy)
}

// inReadCommitted runs fn in a READ COMMITTED transaction of its own,
// whatever default_transaction_isolation says.
func inReadCommitted(ctx context.Context, conn *pgx.Conn, fn func(pgx.Tx) error) error {
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback(ctx)
		return err
	}
	return tx.Commit(ctx)
}
