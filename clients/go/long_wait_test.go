package fencing

// A wait longer than a minute keeps its place in line (issue 43): the line
// keeps arrival order for the whole wait, not for slices of it. It takes
// about 70 s, so it runs only with PG_FENCING_LONG_WAIT=1 (a script runs the
// long test of every client side by side against one cluster).

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v4"
)

// linePlaces is the lock's line as fencing_lines shows it: each waiting
// place and its position, in order.
func linePlaces(t *testing.T, db *pgx.Conn, name string) [][2]int64 {
	t.Helper()
	rows, err := db.Query(context.Background(), "SELECT place, position FROM fencing_lines WHERE lock_name = $1 ORDER BY place", name)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var places [][2]int64
	for rows.Next() {
		var place, position int64
		if err := rows.Scan(&place, &position); err != nil {
			t.Fatal(err)
		}
		places = append(places, [2]int64{place, position})
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return places
}

// A session waits 150 s (ctx's deadline) for a lock a holder keeps with a
// 3 s ttl, renewed by the heartbeat; B joins behind it in plain SQL. For 65 s
// the wait does not return and the line stays A's place at position 1, B's
// at 2; then the holder unlocks and A takes the lock at once, with a greater
// token, while B still waits. It catches a client that re-queues its wait
// (leaves and joins again, say every 30 s: A's place number changes, and it
// is behind B) and one whose wait ends early (a 30 s slice: the wait returns,
// or the place is gone).
func TestAWaitLongerThanAMinuteKeepsItsPlace(t *testing.T) {
	if os.Getenv("PG_FENCING_LONG_WAIT") != "1" {
		t.Skip("a wait of more than a minute (about 70 s): set PG_FENCING_LONG_WAIT=1 to run it")
	}
	const watched, longWait = 65 * time.Second, 150 * time.Second
	// Not testCtx: its 60 s is shorter than the wait.
	ctx, cancel := context.WithTimeout(context.Background(), longWait+30*time.Second)
	defer cancel()
	client, db, name := newClient(t), connectDB(t), "long-wait-"+uniqueName(t)
	session := func(holder string, ttl time.Duration) *Session {
		s, err := client.NewSession(ctx, SessionOptions{TTL: ttl, Holder: holder + "-" + name})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _, _ = s.Close(context.Background()) })
		return s
	}

	// 1. The holder, renewed by the client's heartbeat all along.
	holderSession := session("holder", 3*time.Second)
	held, err := holderSession.TryLock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}

	// 2. A waits in line (polling: the client has no listener).
	aSession := session("A", 5*time.Second)
	waitCtx, stopWaiting := context.WithTimeout(ctx, longWait)
	defer stopWaiting()
	a := waitInBackground(func() (*SessionLease, error) { return aSession.Lock(waitCtx, name) })

	// 3. B joins behind A, in SQL, in a session that lives 5 min unrenewed.
	if !eventually(5*time.Second, func() bool { return len(linePlaces(t, db, name)) == 1 }) {
		t.Fatalf("A has no place in the line of %s: %v", name, linePlaces(t, db, name))
	}
	aPlace := linePlaces(t, db, name)[0][0]
	if mine := placeOf(t, db, aSession); mine != aPlace {
		t.Fatalf("the place in line is %d, A's session's %d", aPlace, mine)
	}
	bSession := queryValue[int64](t, db, "SELECT fencing_session_open('long-wait-B', '5 min')")
	bClosed := false
	t.Cleanup(func() {
		if !bClosed {
			_, _ = db.Exec(context.Background(), "SELECT fencing_session_close($1::bigint)", bSession)
		}
	})
	bPlace := queryValue[int64](t, db, "SELECT place FROM fencing_line_join($1::bigint, $2)", bSession, name)

	// 4. For 65 s, looked at every 5 s and at the end: A still waits, in
	// its first place, first in line, and B second.
	keptPlaces := func(after time.Duration) {
		t.Helper()
		if line, want := linePlaces(t, db, name), [][2]int64{{aPlace, 1}, {bPlace, 2}}; fmt.Sprint(line) != fmt.Sprint(want) {
			t.Fatalf("after %v, the line of %s (place, position) is %v; want A's place %d first and B's %d second "+
				"(did A's wait leave the line and join it again?)", after.Round(time.Second), name, line, aPlace, bPlace)
		}
		if !held.Held() {
			t.Fatalf("after %v, the holder's lease was lost: %v", after.Round(time.Second), held.Err())
		}
	}
	joined := time.Now()
	keptPlaces(0)
	for time.Since(joined) < watched {
		next := 5 * time.Second
		if left := watched - time.Since(joined); left < next {
			next = left
		}
		select {
		case r := <-a:
			t.Fatalf("A's wait returned after %v while the lock was held: %v, %v", time.Since(joined).Round(time.Second), r.lease, r.err)
		case <-time.After(next):
		}
		keptPlaces(time.Since(joined))
	}
	if !waiting(a) {
		t.Fatalf("A's wait returned after %v while the lock was held", time.Since(joined).Round(time.Second))
	}

	// 5. The holder unlocks: A's poll (every 0.5 s) takes the lock; B waits,
	// first in line now.
	if ours, err := held.Release(ctx); err != nil || !ours {
		t.Fatalf("the holder's release: %v, %v", ours, err)
	}
	lease := receive(t, "A's wait, once the holder unlocked", a, 10*time.Second)
	if lease.Token() <= held.Token() {
		t.Fatalf("A's token %d is not greater than the holder's %d", lease.Token(), held.Token())
	}
	if line, want := linePlaces(t, db, name), [][2]int64{{bPlace, 1}}; fmt.Sprint(line) != fmt.Sprint(want) {
		t.Fatalf("once A took the lock, the line of %s is %v; want B's place %d alone, first", name, line, bPlace)
	}
	if state := queryValue[string](t, db, "SELECT state FROM fencing_line_poll(ARRAY[$1::bigint])", bPlace); state != "waiting" {
		t.Fatalf("B's place %d is %s while A holds the lock; want waiting", bPlace, state)
	}

	// 6. Clean up: A unlocks, the sessions close (B's in SQL).
	if ours, err := lease.Release(ctx); err != nil || !ours {
		t.Fatalf("A's release: %v, %v", ours, err)
	}
	for _, s := range []*Session{aSession, holderSession} {
		if _, err := s.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	bClosed = true
	mustExec(t, db, "SELECT fencing_session_close($1::bigint)", bSession)
	if line := linePlaces(t, db, name); len(line) != 0 {
		t.Fatalf("places left in the line of %s: %v", name, line)
	}
}
