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

// The waits here are CALL fencing_await: a lease of its own of any kind,
// and in a session only a wait the line cannot hold (a second shared lease
// or permit of a lock where the session has a place). Every other wait in a
// session is a place in the lock's line (line.go).

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

// liveGrants reads the live grants (lock_name, token) of r's lock that a
// wait of r adds to: its session's (a wait in line), or, for a lease of its own, those of its
// holder outside any session (a holder is unique per lease unless the
// caller gives the same one twice). Exclusive leases are in fencing_leases,
// permits and shared leases in fencing_permits. $1 is the lock, $2 the
// session or the holder.
func (r request) liveGrants() (string, []interface{}) {
	owner := "session_id = $2::bigint"
	var ownerArg interface{} = r.session
	if r.session == 0 {
		owner, ownerArg = "session_id IS NULL AND holder = $2", r.holder
	}
	return "SELECT lock_name, token FROM fencing_leases WHERE lock_name = $1 AND state = 'live' AND " + owner +
			" UNION ALL SELECT lock_name, token FROM fencing_permits WHERE lock_name = $1 AND state = 'live' AND " + owner,
		[]interface{}{r.lockName, ownerArg}
}

// giveBackTimeout bounds the search for, and release of, what a wait whose
// answer was lost may have been granted.
const giveBackTimeout = 5 * time.Second

// acquire takes the lock on conn: one attempt for a wait of 0, else CALL
// fencing_await in slices until granted, the wait is over (ErrLockTimeout)
// or ctx ends (its error; pgx then has the server cancel the CALL and
// closes conn, and what the wait may have been granted is given back).
// sent is the send time of the statement that granted.
func acquire(ctx context.Context, c *Client, conn *pgx.Conn, r request, wait time.Duration) (token Token, sent time.Time, err error) {
	if err := r.check(); err != nil {
		return 0, time.Time{}, err
	}
	if wait < 0 {
		return 0, time.Time{}, fmt.Errorf("pg_fencing: wait must not be negative, got %v", wait)
	}
	var granted *string
	var notGivenBack error // why a grant the wait may have had is still held
	if wait == 0 {
		sent = time.Now()
		sql, args := r.attempt()
		err = inReadCommitted(ctx, conn, func(tx pgx.Tx) error {
			return tx.QueryRow(ctx, sql, args...).Scan(&granted)
		})
	} else {
		// What r's owner holds of the lock already (a session may hold
		// permits of a semaphore, or the lock it waits for), so that a
		// grant the wait loses can be told from them.
		var before []int64
		grants, grantsArgs := r.liveGrants()
		err = conn.QueryRow(ctx, "SELECT coalesce(array_agg(token::bigint), '{}') FROM ("+grants+") AS g",
			grantsArgs...).Scan(&before)
		var end time.Time
		if wait != WaitForever {
			end = time.Now().Add(wait)
		}
		for err == nil {
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
			if err = conn.QueryRow(ctx, sql, args...).Scan(&granted); err != nil {
				// pgx closes the connection when a statement's answer is
				// lost (ctx ended while the CALL ran, or the network
				// failed): the grant may have committed just before.
				if conn.IsClosed() {
					notGivenBack = giveBack(c, conn, r, before)
				}
				break
			}
			if granted != nil {
				break
			}
		}
	}
	if err != nil {
		what, cause := "acquiring", mapGuardError(err)
		if ctx.Err() != nil {
			what, cause = "waiting for", ctx.Err()
		}
		if notGivenBack != nil {
			return 0, sent, fmt.Errorf("pg_fencing: %s %s: %w; a grant the wait may have had was not given back (%v): "+
				"it lasts until its ttl runs out, or in a session until the session ends", what, r.describe(), cause, notGivenBack)
		}
		return 0, sent, fmt.Errorf("pg_fencing: %s %s: %w", what, r.describe(), cause)
	}
	if granted == nil {
		return 0, sent, busyError(r, wait)
	}
	token, err = parseToken(*granted)
	return token, sent, err
}

// giveBack releases what a wait whose answer was lost may have been
// granted: every live grant of r's owner on the lock not in before. In a
// session nothing else would ever end it (the heartbeat keeps it alive until
// the session closes), a lease of its own would keep the lock from everyone
// for its ttl. On a connection of its own, within giveBackTimeout whatever
// ctx was (it has usually ended). A concurrent wait of the same session
// for the same lock is not told apart: what it was granted at that moment
// may be given back too.
func giveBack(c *Client, waited *pgx.Conn, r request, before []int64) error {
	ctx, cancel := context.WithTimeout(context.Background(), giveBackTimeout)
	defer cancel()
	if err := waitForBackend(ctx, c, waited); err != nil {
		return err
	}
	conn, err := c.connect(ctx, "pg_fencing give back")
	if err != nil {
		return err
	}
	defer closeQuietly(conn)
	grants, args := r.liveGrants()
	_, err = conn.Exec(ctx, "SELECT fencing_release(lock_name, token) FROM ("+grants+") AS g WHERE token::bigint <> ALL (coalesce($3::bigint[], '{}'))",
		append(args, before)...)
	return err
}

// waitForBackend returns once the backend that ran the statement whose
// answer was lost with waited has stopped running it (granted or
// cancelled): only then is a grant it made committed and seen. Once pgx
// has sent its cancel request, the backend is looked for by its pid in
// pg_stat_activity, on a connection of its own. Behind PgBouncer the pid is
// PgBouncer's own, found nowhere: then it does not wait.
func waitForBackend(ctx context.Context, c *Client, waited *pgx.Conn) error {
	select {
	case <-waited.PgConn().CleanupDone():
	case <-ctx.Done():
		return fmt.Errorf("pgx's cancel request not sent within %v", giveBackTimeout)
	}
	conn, err := c.connect(ctx, "pg_fencing give back")
	if err != nil {
		return err
	}
	defer closeQuietly(conn)
	for {
		var running bool
		if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_stat_activity WHERE pid = $1 AND state = 'active')",
			waited.PgConn().PID()).Scan(&running); err != nil {
			return err
		}
		if !running {
			return nil
		}
		if !sleepCtx(ctx, 10*time.Millisecond) {
			return fmt.Errorf("the waiting backend (pid %d) still ran after %v", waited.PgConn().PID(), giveBackTimeout)
		}
	}
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
