package fencing

// Every wait in a session is a place in line (pg_fencing 1.10, issue 43):
// a wait for a permit of a semaphore or for a shared lease too, not only
// one for an exclusive lease.

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v4"
)

type waitResult struct {
	lease *SessionLease
	err   error
}

func waitInBackground(wait func() (*SessionLease, error)) chan waitResult {
	result := make(chan waitResult, 1)
	go func() {
		lease, err := wait()
		result <- waitResult{lease, err}
	}()
	return result
}

// waiting: the result has not come yet (it is put back when it has).
func waiting[T any](result chan T) bool {
	select {
	case r := <-result:
		result <- r
		return false
	default:
		return true
	}
}

func receive(t *testing.T, what string, result chan waitResult, timeout time.Duration) *SessionLease {
	t.Helper()
	select {
	case r := <-result:
		if r.err != nil {
			t.Fatalf("%s: %v", what, r.err)
		}
		return r.lease
	case <-time.After(timeout):
		t.Fatalf("%s: nothing within %v", what, timeout)
	}
	return nil
}

// waitsOnTheServer: the session has a place in line that waits, or a CALL
// fencing_await of its runs.
func waitsOnTheServer(t *testing.T, db *pgx.Conn, s *Session) bool {
	return queryValue[bool](t, db, "SELECT EXISTS (SELECT FROM fencing_line WHERE session_id = $1 AND token IS NULL) OR "+
		"EXISTS (SELECT FROM pg_stat_activity WHERE application_name = $2 AND state = 'active' AND query LIKE 'CALL fencing_await%')",
		s.ID(), "pg_fencing session "+s.Holder())
}

// A session's wait for a permit (a semaphore of 2, both held) and one for a
// shared lease (behind a live exclusive lease), through a transaction-pooling
// PgBouncer with a pool of 2: while they wait, another client's short
// statements through the same pool keep going (two CALL fencing_await would
// take the whole pool), the server never has more backends than the pool,
// and each wait takes its lease once it is freed.
func TestWaitsForAPermitAndASharedLeaseHoldNoServerConnection(t *testing.T) {
	const poolSize = 2
	pooled := startPgBouncer(t, poolSize)
	ctx, direct, db := testCtx(t), newClient(t), connectDB(t)
	semaphore, shared := uniqueName(t), uniqueName(t)
	client, err := New(pooled)
	if err != nil {
		t.Fatal(err)
	}
	var blockers []*Lease
	for i := 0; i < 2; i++ {
		permit, err := direct.Acquire(ctx, semaphore, LeaseOptions{Kind: Permit, Permits: 2, TTL: 30 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		blockers = append(blockers, permit)
	}
	writer, err := direct.Acquire(ctx, shared, LeaseOptions{TTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // and their connections closed
		for _, lease := range append(blockers, writer) {
			_, _ = lease.Release(context.Background())
		}
	})
	session := func(holder string) *Session {
		s, err := client.NewSession(ctx, SessionOptions{TTL: 5 * time.Second, Holder: holder})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			closeCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_, _ = s.Close(closeCtx)
		})
		return s
	}
	permitSession, sharedSession := session("permit-"+semaphore), session("shared-"+shared)
	waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	permitWait := waitInBackground(func() (*SessionLease, error) { return NewSemaphore(permitSession, semaphore, 2).Acquire(waitCtx) })
	sharedWait := waitInBackground(func() (*SessionLease, error) { return sharedSession.LockShared(waitCtx, shared) })

	// Both wait on the server (a place, or a statement that waits).
	if !eventually(10*time.Second, func() bool {
		return waitsOnTheServer(t, db, permitSession) && waitsOnTheServer(t, db, sharedSession)
	}) {
		t.Fatal("the two waits are not on the server")
	}
	other, err := New(pooled)
	if err != nil {
		t.Fatal(err)
	}
	var mostBackends int64
	for i := 0; i < 10; i++ {
		stmtCtx, cancelStmt := context.WithTimeout(ctx, 2*time.Second)
		_, err := other.Leader(stmtCtx, uniqueName(t)) // one short statement through the pool
		cancelStmt()
		if err != nil {
			t.Fatalf("another client's statement %d through the pool while the two wait: %v", i, err)
		}
		// The direct client's leases aside: their heartbeat's connection.
		backends := queryValue[int64](t, db, "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid() "+
			"AND application_name NOT LIKE 'pg_fencing lease %' AND application_name <> $1", direct.beats.name)
		if backends > mostBackends {
			mostBackends = backends
		}
		time.Sleep(100 * time.Millisecond)
	}
	if mostBackends > poolSize {
		t.Errorf("%d server backends, more than the pool's %d", mostBackends, poolSize)
	}
	if !waiting(permitWait) || !waiting(sharedWait) {
		t.Fatal("a wait ended before its lease was freed")
	}

	if _, err := blockers[0].Release(ctx); err != nil {
		t.Fatal(err)
	}
	permit := receive(t, "the wait for a permit", permitWait, 10*time.Second)
	if !queryValue[bool](t, db, "SELECT EXISTS (SELECT FROM fencing_permits WHERE lock_name = $1 AND token::bigint = $2 AND session_id = $3 AND state = 'live')",
		semaphore, int64(permit.Token()), permitSession.ID()) {
		t.Fatalf("the permit %d is not live in the session", permit.Token())
	}
	if _, err := writer.Release(ctx); err != nil {
		t.Fatal(err)
	}
	reader := receive(t, "the wait for a shared lease", sharedWait, 10*time.Second)
	if !queryValue[bool](t, db, "SELECT EXISTS (SELECT FROM fencing_permits WHERE lock_name = $1 AND token::bigint = $2 AND session_id = $3 AND state = 'live')",
		shared, int64(reader.Token()), sharedSession.ID()) {
		t.Fatalf("the shared lease %d is not live in the session", reader.Token())
	}
	for _, lease := range []*SessionLease{permit, reader} {
		if ours, err := lease.Release(ctx); err != nil || !ours {
			t.Fatalf("releasing %v: %v, %v", lease, ours, err)
		}
	}
	if n := queryValue[int64](t, db, "SELECT count(*) FROM fencing_line WHERE session_id = ANY($1)",
		[]int64{permitSession.ID(), sharedSession.ID()}); n != 0 {
		t.Errorf("%d places left after the leases were released", n)
	}
	if n := queryValue[int64](t, db, "SELECT count(*) FROM fencing_permits WHERE state = 'live' AND session_id = ANY($1)",
		[]int64{permitSession.ID(), sharedSession.ID()}); n != 0 {
		t.Errorf("%d leases left after they were released", n)
	}
}

// Three waits for one of 2 permits (both held), started in the order A, B,
// C, B and C polling 20 times as often as A: a permit freed goes to A (not
// to a third party asking outside the line in the releasing transaction),
// the next one to B, while C waits on. The waits are places in the semaphore's
// line, kept as long as they wait: A's connections (but its heartbeat's)
// are terminated while it waits, and it keeps its turn.
func TestPermitsGoToTheirWaitsInArrivalOrder(t *testing.T) {
	ctx, direct, db, name := testCtx(t), newClient(t), connectDB(t), uniqueName(t)
	var blockers []*Lease
	for i := 0; i < 2; i++ {
		permit, err := direct.Acquire(ctx, name, LeaseOptions{Kind: Permit, Permits: 2, TTL: 30 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		blockers = append(blockers, permit)
	}
	t.Cleanup(func() {
		for _, lease := range blockers {
			_, _ = lease.Release(context.Background())
		}
	})
	waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var sessions []*Session
	var waits []chan waitResult
	for _, who := range []string{"A", "B", "C"} {
		poll := 50 * time.Millisecond
		if who == "A" {
			poll = time.Second
		}
		client, err := direct.WithLine(LineOptions{Poll: poll})
		if err != nil {
			t.Fatal(err)
		}
		holder := fmt.Sprintf("%s-%s", who, name)
		s, err := client.NewSession(ctx, SessionOptions{TTL: 5 * time.Second, Holder: holder})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _, _ = s.Close(context.Background()) })
		sessions = append(sessions, s)
		waits = append(waits, waitInBackground(func() (*SessionLease, error) { return NewSemaphore(s, name, 2).Acquire(waitCtx) }))
		// On the server before the next one starts.
		if !eventually(10*time.Second, func() bool { return waitsOnTheServer(t, db, s) }) {
			t.Fatalf("the wait of %s is not on the server", who)
		}
	}
	// A's connections are cut; its place is the database's.
	mustExec(t, db, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1 AND pid <> pg_backend_pid()",
		"pg_fencing session A-"+name)
	time.Sleep(200 * time.Millisecond)
	for i, who := range []string{"A", "B", "C"} {
		if !waiting(waits[i]) {
			r := <-waits[i]
			t.Fatalf("%s's wait ended before a permit was freed: %v, %v", who, r.lease, r.err)
		}
	}

	// Released, and asked for by a third party outside the line, in one
	// transaction: the permit is A's, not the third party's.
	tx, err := db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var released bool
	var stolen *string
	if err := tx.QueryRow(ctx, "SELECT fencing_release($1, $2::fencing_token)", name, blockers[0].Token()).Scan(&released); err != nil || !released {
		t.Fatalf("releasing a permit: %v, %v", released, err)
	}
	if err := tx.QueryRow(ctx, "SELECT fencing_acquire_permit($1, 'third party', 2, '10 s')::text", name).Scan(&stolen); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if stolen != nil {
		t.Fatalf("a permit asked for outside the line was granted while A, B and C wait: %s", *stolen)
	}
	a := receive(t, "A's wait for the first permit freed", waits[0], 10*time.Second)
	if !waiting(waits[1]) || !waiting(waits[2]) {
		t.Fatal("B or C had a permit before a second one was freed")
	}
	if _, err := blockers[1].Release(ctx); err != nil {
		t.Fatal(err)
	}
	b := receive(t, "B's wait for the second permit freed", waits[1], 10*time.Second)
	time.Sleep(300 * time.Millisecond) // C polls a few times
	if !waiting(waits[2]) {
		r := <-waits[2]
		t.Fatalf("C had a permit too, with none free: %v, %v", r.lease, r.err)
	}
	if a.Token() == b.Token() {
		t.Fatalf("A and B have the same permit %d", a.Token())
	}
	// A releases: its permit goes to C, and A's place goes with it.
	if ours, err := a.Release(ctx); err != nil || !ours {
		t.Fatalf("A's release: %v, %v", ours, err)
	}
	c := receive(t, "C's wait after A released", waits[2], 10*time.Second)
	for i, lease := range []*SessionLease{b, c} {
		if ours, err := lease.Release(ctx); err != nil || !ours {
			t.Fatalf("%d's release: %v, %v", i, ours, err)
		}
	}
	ids := []int64{sessions[0].ID(), sessions[1].ID(), sessions[2].ID()}
	if n := queryValue[int64](t, db, "SELECT count(*) FROM fencing_line WHERE session_id = ANY($1)", ids); n != 0 {
		t.Errorf("%d places left after every permit was released", n)
	}
}
