package fencing

// Session.LockAll with a wait waits in line (issue 43): one lock at a time,
// in byte order, each a place; all or none for the result.

import (
	"context"
	"errors"
	"testing"
	"time"
)

type lockAllResult struct {
	leases []*SessionLease
	err    error
}

func lockAllInBackground(ctx context.Context, s *Session, names []string, wait time.Duration) chan lockAllResult {
	result := make(chan lockAllResult, 1)
	go func() {
		leases, err := s.LockAll(ctx, names, wait)
		result <- lockAllResult{leases, err}
	}()
	return result
}

// Two locks, both busy: while LockAll waits for them, none of the waiting
// session's connections runs a statement, or holds a snapshot
// (backend_xmin), for longer than 250 ms, and in most samples all of them
// are idle (pg_stat_activity); it has a place in the first lock's line.
// When the locks are released, one after the other, it takes the first in
// byte order at once (seen held while it waits for the other), then the
// other, and returns the tokens in the caller's order.
func TestLockAllWithAWaitHoldsNoSnapshotNorConnectionWhileItWaits(t *testing.T) {
	ctx, client, db, name := testCtx(t), newClient(t), connectDB(t), uniqueName(t)
	first, second := name+"_a", name+"_b" // byte order: first, then second
	holder, err := client.NewSession(ctx, SessionOptions{TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(ctx)
	held, err := holder.LockAll(ctx, []string{first, second}, 0)
	if err != nil {
		t.Fatal(err)
	}
	waiterName := name + "_waiter"
	waiter, err := client.NewSession(ctx, SessionOptions{TTL: 10 * time.Second, Holder: waiterName})
	if err != nil {
		t.Fatal(err)
	}
	defer waiter.Close(ctx)
	result := lockAllInBackground(ctx, waiter, []string{second, first}, 15*time.Second)

	time.Sleep(300 * time.Millisecond)
	// Its connections as pg_stat_activity shows them, 15 samples over 1.5 s.
	const samples = 15
	quiet := 0
	for i := 0; i < samples; i++ {
		var busy, longRunning, snapshots int64
		if err := db.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state <> 'idle'),
		            count(*) FILTER (WHERE state <> 'idle' AND clock_timestamp() - state_change > interval '250 ms'),
		            count(*) FILTER (WHERE backend_xmin IS NOT NULL AND clock_timestamp() - coalesce(xact_start, state_change) > interval '250 ms')
		       FROM pg_stat_activity WHERE application_name = $1`,
			"pg_fencing session "+waiterName).Scan(&busy, &longRunning, &snapshots); err != nil {
			t.Fatal(err)
		}
		if longRunning != 0 || snapshots != 0 {
			t.Fatalf("sample %d: %d of the waiter's connections have run a statement (or been in a transaction) "+
				"for more than 250 ms, %d have held a snapshot that long", i, longRunning, snapshots)
		}
		if busy == 0 {
			quiet++
		}
		time.Sleep(100 * time.Millisecond)
	}
	if quiet < samples*2/3 {
		t.Fatalf("the waiter's connections were idle in %d of %d samples only", quiet, samples)
	}
	if !waiting(result) {
		t.Fatal("LockAll returned while both locks were held")
	}
	if n := queryValue[int64](t, db, "SELECT count(*) FROM fencing_lines WHERE session_id = $1 AND lock_name = $2",
		waiter.ID(), first); n != 1 {
		t.Fatalf("LockAll has %d places in the line of the first lock in byte order", n)
	}

	// The first in byte order freed: taken at once, held while it waits.
	if ok, err := held[0].Release(ctx); !ok || err != nil {
		t.Fatalf("releasing %s: %v, %v", first, ok, err)
	}
	// The first taken, then a place joined in the second's line: two
	// statements of the waiter, so both are waited for together.
	takenFirst := func() bool {
		return queryValue[int64](t, db, "SELECT count(*) FROM fencing_leases WHERE lock_name = $1 AND live AND session_id = $2",
			first, waiter.ID()) == 1
	}
	placesInSecond := func() int64 {
		return queryValue[int64](t, db, "SELECT count(*) FROM fencing_lines WHERE session_id = $1 AND lock_name = $2",
			waiter.ID(), second)
	}
	eventually(5*time.Second, func() bool { return takenFirst() && placesInSecond() == 1 })
	if !takenFirst() {
		t.Fatal("the lock freed first was not taken while LockAll waited for the other")
	}
	if n := placesInSecond(); n != 1 {
		t.Fatalf("the waiter has %d places in the second lock's line", n)
	}
	if !waiting(result) {
		t.Fatal("LockAll returned while the second lock was held")
	}
	if ok, err := held[1].Release(ctx); !ok || err != nil {
		t.Fatalf("releasing %s: %v, %v", second, ok, err)
	}
	var got lockAllResult
	select {
	case got = <-result:
	case <-time.After(5 * time.Second):
		t.Fatal("LockAll did not return once both locks were free")
	}
	if got.err != nil {
		t.Fatal(got.err)
	}
	if len(got.leases) != 2 || got.leases[0].LockName() != second || got.leases[1].LockName() != first {
		t.Fatalf("leases not in the caller's order: %v", got.leases)
	}
	for _, lease := range got.leases {
		live := queryValue[int64](t, db, "SELECT token::bigint FROM fencing_leases WHERE lock_name = $1 AND live AND session_id = $2",
			lease.LockName(), waiter.ID())
		if Token(live) != lease.Token() || !lease.Held() {
			t.Fatalf("%s: token %d, the live lease's %d", lease.LockName(), lease.Token(), live)
		}
	}
	for _, lease := range got.leases {
		if ok, err := lease.Release(ctx); !ok || err != nil {
			t.Fatalf("releasing %s: %v, %v", lease.LockName(), ok, err)
		}
	}
	if n := queryValue[int64](t, db, "SELECT count(*) FROM fencing_line WHERE session_id = $1", waiter.ID()); n != 0 {
		t.Fatalf("%d places left after the releases", n)
	}
}

// One of two locks stays busy past the wait: LockAll takes the other (the
// first in byte order) while it waits, and fails with ErrLockTimeout at
// the deadline, giving back the lease it took (fencing_leases: released,
// no longer in the session) and leaving no place in any line; the lock it
// gave back is free for another session at once.
func TestLockAllGivesBackWhatItTookWhenALockStaysBusy(t *testing.T) {
	ctx, client, db, name := testCtx(t), newClient(t), connectDB(t), uniqueName(t)
	free, busy := name+"_a", name+"_b"
	holder, err := client.NewSession(ctx, SessionOptions{TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(ctx)
	if _, err := holder.TryLock(ctx, busy); err != nil {
		t.Fatal(err)
	}
	waiterName := name + "_waiter"
	waiter, err := client.NewSession(ctx, SessionOptions{TTL: 10 * time.Second, Holder: waiterName})
	if err != nil {
		t.Fatal(err)
	}
	defer waiter.Close(ctx)
	const wait = 1500 * time.Millisecond
	started := time.Now()
	result := lockAllInBackground(ctx, waiter, []string{busy, free}, wait)

	var taken int64
	if !eventually(time.Second, func() bool {
		taken = queryValue[int64](t, db, "SELECT coalesce(max(token::bigint), 0) FROM fencing_leases "+
			"WHERE lock_name = $1 AND live AND session_id = $2", free, waiter.ID())
		return taken != 0 && queryValue[int64](t, db, "SELECT count(*) FROM fencing_lines WHERE session_id = $1 AND lock_name = $2",
			waiter.ID(), busy) == 1
	}) {
		t.Fatal("while it waits, LockAll neither holds the free lock nor has a place in the busy one's line")
	}
	var got lockAllResult
	select {
	case got = <-result:
	case <-time.After(5 * time.Second):
		t.Fatal("LockAll did not end at its deadline")
	}
	if !errors.Is(got.err, ErrLockTimeout) || got.leases != nil {
		t.Fatalf("LockAll past its wait: %v, %v", got.leases, got.err)
	}
	if took := time.Since(started); took < wait-100*time.Millisecond || took > wait+2*time.Second {
		t.Fatalf("LockAll ended after %v, its wait was %v", took, wait)
	}
	var state, leaseHolder string
	var token, session *int64
	if err := db.QueryRow(ctx, "SELECT state, holder, token::bigint, session_id FROM fencing_leases WHERE lock_name = $1", free).
		Scan(&state, &leaseHolder, &token, &session); err != nil {
		t.Fatal(err)
	}
	if state != "released" || leaseHolder != waiterName || token == nil || *token != taken || session != nil {
		t.Fatalf("the lease LockAll took: state %s, holder %s, token %v (taken %d), session %v", state, leaseHolder, token, taken, session)
	}
	if n := queryValue[int64](t, db, "SELECT count(*) FROM fencing_leases WHERE session_id = $1", waiter.ID()); n != 0 {
		t.Fatalf("the session still has %d leases", n)
	}
	if n := queryValue[int64](t, db, "SELECT count(*) FROM fencing_line WHERE session_id = $1", waiter.ID()); n != 0 {
		t.Fatalf("%d places of the session are left", n)
	}
	if n := queryValue[int64](t, db, "SELECT count(*) FROM fencing_lines WHERE lock_name IN ($1, $2)", free, busy); n != 0 {
		t.Fatalf("%d places are left in the two lines", n)
	}
	if _, err := holder.TryLock(ctx, free); err != nil {
		t.Fatalf("the lock LockAll gave back: %v", err)
	}
}
