package fencing

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgconn"
)

// Mutex is an exclusive lock in a session, as etcd's concurrency.Mutex:
// Lock waits (until ctx ends) and returns the fencing token to write with.
type Mutex struct {
	session *Session
	name    string

	mu    sync.Mutex
	lease *SessionLease
}

// NewMutex makes a mutex on lock name in s; nothing is sent until Lock.
func NewMutex(s *Session, name string) *Mutex { return &Mutex{session: s, name: name} }

// Lock waits for the lock until ctx ends and returns its token. Locking a
// mutex this one already holds returns the same token.
func (m *Mutex) Lock(ctx context.Context) (Token, error) {
	return m.lock(ctx, WaitForever)
}

// TryLock takes the lock if it is free, else ErrLockTimeout.
func (m *Mutex) TryLock(ctx context.Context) (Token, error) {
	return m.lock(ctx, 0)
}

func (m *Mutex) lock(ctx context.Context, wait time.Duration) (Token, error) {
	// Always asked of the server, even when this mutex thinks it holds the
	// lock: the lease may have been revoked while the session lived on, and
	// only the server knows. The session's live lease gives its token back.
	// Not under m.mu: IsOwner and Token answer at once during a wait.
	lease, err := m.session.acquire(ctx, request{lockName: m.name, kind: Exclusive}, wait)
	if err != nil {
		return 0, err
	}
	m.mu.Lock()
	keepPlace(lease, m.lease)
	m.lease = lease
	m.mu.Unlock()
	return lease.token, nil
}

// Unlock releases the lock: an error matching ErrLeaseLost if it was no
// longer ours on the server (or the session had ended).
func (m *Mutex) Unlock(ctx context.Context) error {
	m.mu.Lock()
	lease := m.lease
	m.lease = nil
	m.mu.Unlock()
	if lease == nil {
		return fmt.Errorf("pg_fencing: unlock of lock %q, which this mutex does not hold", m.name)
	}
	ours, err := lease.Release(ctx)
	if err != nil {
		return err
	}
	if !ours {
		return lostError(fmt.Sprintf("lock %q in %s", m.name, m.session.describe()), lease.token,
			"the server no longer had it as ours when it was unlocked")
	}
	return nil
}

// IsOwner says whether this mutex holds the lock now (its session held).
func (m *Mutex) IsOwner() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.lease != nil && m.lease.Held()
}

// Token is the token of the current hold, 0 if none.
func (m *Mutex) Token() Token {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.lease == nil {
		return 0
	}
	return m.lease.token
}

// Err is nil while the mutex holds the lock, else an error matching
// ErrLeaseLost.
func (m *Mutex) Err() error {
	m.mu.Lock()
	lease := m.lease
	m.mu.Unlock()
	if lease == nil {
		return lostError(fmt.Sprintf("lock %q", m.name), 0, "not locked")
	}
	return lease.Err()
}

// Exec runs a fenced write (FencedExec) under the lock: ErrLeaseLost
// without sending anything unless the mutex holds it.
func (m *Mutex) Exec(ctx context.Context, db Beginner, sql string, args ...interface{}) (pgconn.CommandTag, error) {
	return fencedExec(ctx, m, db, sql, args)
}

// Semaphore hands out permits of lock name in a session, each with its own
// token: at most permits holders at once, across every session.
type Semaphore struct {
	session *Session
	name    string
	permits int
}

// NewSemaphore makes a semaphore of permits permits on lock name in s.
func NewSemaphore(s *Session, name string, permits int) *Semaphore {
	return &Semaphore{session: s, name: name, permits: permits}
}

// Acquire waits until ctx ends for a permit; Release it when done. The
// wait is a place in the semaphore's line (pg_fencing 1.10): free permits
// go to the waiting places in the order they joined. The server keeps one
// place per session and lock: a second wait of the session for a permit of
// the semaphore while it has a place there (waiting, or kept by a permit
// taken through the line) is CALL fencing_await, on a connection of its own
// for its length, as before the line.
func (sem *Semaphore) Acquire(ctx context.Context) (*SessionLease, error) {
	return sem.session.acquire(ctx, request{lockName: sem.name, kind: Permit, permits: sem.permits}, WaitForever)
}

// TryAcquire takes a permit if one is free, else ErrLockTimeout.
func (sem *Semaphore) TryAcquire(ctx context.Context) (*SessionLease, error) {
	return sem.session.acquire(ctx, request{lockName: sem.name, kind: Permit, permits: sem.permits}, 0)
}

// keepPlace: a lease got back from the server with the token of the one
// held before (locked or campaigned again while holding) keeps that one's
// place in the lock's line, which its release leaves.
func keepPlace(lease, before *SessionLease) {
	if before != nil && lease.place == 0 && lease.token == before.token {
		lease.place = before.place
	}
}
