package fencing

// Waits in line (pg_fencing 1.10, issue 43): a session's wait for an
// exclusive lease -- Mutex.Lock, Election.Campaign -- is a place the
// database keeps, polled in short statements, instead of a CALL
// fencing_await that holds a server connection for the whole wait. These
// tests use only the API the package had before the line, so that they run
// against the old package too, and fail there.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v4"
)

// placeOf is the session's place in line waiting for a lease (0: none).
func placeOf(t *testing.T, db *pgx.Conn, session *Session) int64 {
	return queryValue[int64](t, db, "SELECT coalesce(max(place), 0) FROM fencing_line WHERE session_id = $1 AND token IS NULL", session.ID())
}

// longStatements counts the statements of the connections named app that
// have run for more than 200 ms, or backends of theirs that hold a snapshot
// or a transaction id: none, for a wait that is a place in line.
func longStatements(t *testing.T, db *pgx.Conn, apps ...string) int64 {
	return queryValue[int64](t, db, "SELECT count(*) FROM pg_stat_activity WHERE application_name = ANY($1) AND "+
		"((state = 'active' AND clock_timestamp() - query_start > interval '200 ms') OR backend_xmin IS NOT NULL OR backend_xid IS NOT NULL)", apps)
}

type lockResult struct {
	token Token
	err   error
	at    time.Time
}

func lockInBackground(ctx context.Context, m *Mutex) chan lockResult {
	result := make(chan lockResult, 1)
	go func() {
		token, err := m.Lock(ctx)
		result <- lockResult{token, err, time.Now()}
	}()
	return result
}

// A waiter keeps its place in the lock's line for the whole wait: nobody
// who did not wait takes the lock when it is freed, and the first in line
// has it before the second. The place is the database's, not a
// connection's: the waiters run no statement on the server while they wait,
// and the first one's connections may be terminated meanwhile.
func TestAWaitInLineKeepsItsPlace(t *testing.T) {
	ctx, client, db, name := testCtx(t), newClient(t), connectDB(t), uniqueName(t)
	session := func(holder string) *Session {
		s, err := client.NewSession(ctx, SessionOptions{TTL: 5 * time.Second, Holder: holder + "-" + name})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _, _ = s.Close(context.Background()) })
		return s
	}
	holderSession, firstSession, secondSession := session("holder"), session("first"), session("second")
	holder := NewMutex(holderSession, name)
	if _, err := holder.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	firstMutex, secondMutex := NewMutex(firstSession, name), NewMutex(secondSession, name)
	first := lockInBackground(waitCtx, firstMutex)
	if !eventually(5*time.Second, func() bool { return placeOf(t, db, firstSession) != 0 }) {
		t.Fatal("the first waiter has no place in line")
	}
	firstPlace := placeOf(t, db, firstSession)
	second := lockInBackground(waitCtx, secondMutex)
	if !eventually(5*time.Second, func() bool { return placeOf(t, db, secondSession) != 0 }) {
		t.Fatal("the second waiter has no place in line")
	}
	if secondPlace := placeOf(t, db, secondSession); secondPlace <= firstPlace {
		t.Fatalf("places %d and %d: the second is not behind the first", firstPlace, secondPlace)
	}

	// Nothing runs on the server for them while they wait: short polls.
	apps := []string{"pg_fencing session first-" + name, "pg_fencing session second-" + name}
	for i := 0; i < 5; i++ {
		if n := longStatements(t, db, apps...); n != 0 {
			t.Fatalf("%d backends of the waiters run a long statement, or hold a snapshot, while they wait", n)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// The first waiter's connections (all but its session's heartbeat) are
	// terminated: it polls again on a new one, in the same place.
	terminated := queryValue[int64](t, db, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "+
		"WHERE application_name = $1 AND (query LIKE '%fencing_line%' OR query LIKE 'CALL fencing_await%')", apps[0])
	if terminated == 0 {
		t.Fatal("no connection of the first waiter's wait to terminate")
	}
	time.Sleep(time.Second) // a poll or two
	if place := placeOf(t, db, firstSession); place != firstPlace {
		t.Fatalf("after its connection was terminated, the first waiter's place is %d, was %d", place, firstPlace)
	}
	select {
	case r := <-first:
		t.Fatalf("the first wait ended while the lock was held: %v, %v", r.token, r.err)
	default:
	}

	intruder, err := client.NewSession(ctx, SessionOptions{TTL: 5 * time.Second, Holder: "intruder-" + name})
	if err != nil {
		t.Fatal(err)
	}
	defer intruder.Close(ctx)
	// Until r arrives, nobody else takes the freed lock: a plain acquire of
	// its own, one in another session, one in SQL.
	intrude := func(r chan lockResult) lockResult {
		for attempts := 0; ; attempts++ {
			select {
			case result := <-r:
				if attempts == 0 {
					t.Fatal("the lock was taken before anyone else tried")
				}
				return result
			default:
			}
			if lease, err := client.Acquire(ctx, name, LeaseOptions{TTL: 5 * time.Second}); !errors.Is(err, ErrLockTimeout) {
				t.Fatalf("a plain acquire while others wait in line: %v, %v", lease, err)
			}
			if lease, err := intruder.TryLock(ctx, name); !errors.Is(err, ErrLockTimeout) {
				t.Fatalf("another session's acquire while others wait in line: %v, %v", lease, err)
			}
			if token := queryValue[*string](t, db, "SELECT fencing_acquire($1, 'intruder', '5 s')::text", name); token != nil {
				t.Fatalf("fencing_acquire while others wait in line: token %s", *token)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	got := intrude(first)
	if got.err != nil {
		t.Fatalf("the first in line: %v", got.err)
	}
	select {
	case r := <-second:
		t.Fatalf("the second in line got the lock (%v, %v) while the first holds it", r.token, r.err)
	default:
	}
	if leader, err := client.Leader(ctx, name); err != nil || leader == nil || leader.Token != got.token ||
		leader.Holder != "first-"+name {
		t.Fatalf("the lock's holder: %+v, %v; want first-%s with token %d", leader, err, name, got.token)
	}
	if token, err := firstMutex.TryLock(ctx); err != nil || token != got.token {
		t.Fatalf("the first waiter's session locking again: %d, %v; want %d", token, err, got.token)
	}
	if err := firstMutex.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	next := intrude(second)
	if next.err != nil || next.token <= got.token {
		t.Fatalf("the second in line: %d, %v (the first had %d)", next.token, next.err, got.token)
	}
	if err := secondMutex.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	// The sessions live on: their places were left with their leases.
	ids := []int64{holderSession.ID(), firstSession.ID(), secondSession.ID(), intruder.ID()}
	if n := queryValue[int64](t, db, "SELECT count(*) FROM fencing_line WHERE session_id = ANY($1)", ids); n != 0 {
		t.Fatalf("%d places left in line", n)
	}
}

// A candidate that comes back with waits shorter than its poll period
// (contexts of 200 ms, a poll every 1 s, its other work between them, as the
// C++ demo's leader scenario's 250 ms attempts) polls its place a little
// before each context's deadline: when the holder unlocks during one of its
// waits, it takes the lock within a few attempts, and a third party's plain
// acquire meanwhile gets nothing. (A wait that left at its deadline without
// polling left the lock free and its line empty.)
func TestACandidateThatComesBackWithShortWaitsTakesItsTurn(t *testing.T) {
	ctx, client, db, name := testCtx(t), newClient(t), connectDB(t), uniqueName(t)
	rare, err := client.WithLine(LineOptions{Poll: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	newSession := func(c *Client, holder string) *Session {
		s, err := c.NewSession(ctx, SessionOptions{TTL: 10 * time.Second, Holder: holder})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _, _ = s.Close(context.Background()) })
		return s
	}
	holder := NewMutex(newSession(client, "holder-"+name), name)
	candidateSession := newSession(rare, "looping-"+name)
	candidate := NewMutex(candidateSession, name)
	if _, err := holder.Lock(ctx); err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	var attempts []time.Time // when each attempt began
	lastAttempt := func() (int, time.Time) {
		mu.Lock()
		defer mu.Unlock()
		if len(attempts) == 0 {
			return 0, time.Time{}
		}
		return len(attempts), attempts[len(attempts)-1]
	}
	type taken struct {
		token   Token
		attempt int
		err     error
	}
	done := make(chan taken, 1)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			mu.Lock()
			attempts = append(attempts, time.Now())
			n := len(attempts)
			mu.Unlock()
			attemptCtx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
			token, err := candidate.Lock(attemptCtx)
			cancel()
			if err == nil || !errors.Is(err, context.DeadlineExceeded) {
				done <- taken{token, n, err}
				return
			}
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond): // its other work
			}
		}
	}()

	// 50 ms into its third attempt (or a later one), its place in line: the unlock.
	releasedIn := 0
	deadline := time.Now().Add(10 * time.Second)
	for releasedIn == 0 && time.Now().Before(deadline) {
		if n, at := lastAttempt(); n >= 3 && time.Since(at) < 50*time.Millisecond {
			time.Sleep(time.Until(at.Add(50 * time.Millisecond)))
			if again, _ := lastAttempt(); again == n && placeOf(t, db, candidateSession) != 0 {
				if err := holder.Unlock(ctx); err != nil {
					t.Fatal(err)
				}
				releasedIn = n
				continue
			}
		}
		time.Sleep(2 * time.Millisecond)
	}
	if releasedIn == 0 {
		t.Fatal("no attempt of the candidate's to unlock during")
	}
	var got taken
	third := 0
	for waiting := true; waiting; {
		select {
		case got = <-done:
			waiting = false
		default:
			if token := queryValue[*string](t, db, "SELECT fencing_acquire($1, 'third', '10 s')::text", name); token != nil {
				n, _ := lastAttempt()
				t.Fatalf("a third party's plain acquire took the lock (token %s) after attempt %d of the candidate (unlocked in %d)",
					*token, n, releasedIn)
			}
			third++
			if time.Now().After(deadline) {
				t.Fatal("the candidate never took the lock")
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	if got.err != nil {
		t.Fatalf("the candidate's attempt %d: %v", got.attempt, got.err)
	}
	if got.attempt > releasedIn+2 || third == 0 {
		t.Fatalf("taken at attempt %d, unlocked in %d (%d acquires of a third party meanwhile)", got.attempt, releasedIn, third)
	}
	if leader, err := client.Leader(ctx, name); err != nil || leader == nil || leader.Token != got.token ||
		leader.Holder != "looping-"+name {
		t.Fatalf("the lock's holder: %+v, %v; want looping-%s with token %d", leader, err, name, got.token)
	}
	if err := candidate.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if n := queryValue[int64](t, db, "SELECT count(*) FROM fencing_line WHERE session_id = $1", candidateSession.ID()); n != 0 {
		t.Fatalf("%d places left in line", n)
	}
}

// Closing a session ends a wait in line in it at once, reported as the
// session's loss, and the session's end takes its place with it.
func TestClosingASessionEndsItsWaitInLine(t *testing.T) {
	ctx, client, db, name := testCtx(t), newClient(t), connectDB(t), uniqueName(t)
	holderSession, err := client.NewSession(ctx, SessionOptions{TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer holderSession.Close(ctx)
	if _, err := NewMutex(holderSession, name).Lock(ctx); err != nil {
		t.Fatal(err)
	}
	waiterSession, err := client.NewSession(ctx, SessionOptions{TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	result := lockInBackground(ctx, NewMutex(waiterSession, name))
	if !eventually(5*time.Second, func() bool { return placeOf(t, db, waiterSession) != 0 }) {
		t.Fatal("the waiter has no place in line")
	}
	closed := time.Now()
	if _, err := waiterSession.Close(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-result:
		if !errors.Is(r.err, ErrLeaseLost) && !errors.Is(r.err, ErrSessionEnded) {
			t.Fatalf("the wait in a closed session: %v, %v", r.token, r.err)
		}
		if r.at.Sub(closed) > time.Second {
			t.Fatalf("the wait ended %v after its session closed", r.at.Sub(closed))
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the wait goes on in a closed session")
	}
	if n := queryValue[int64](t, db, "SELECT count(*) FROM fencing_line WHERE session_id = $1", waiterSession.ID()); n != 0 {
		t.Fatalf("%d places of the closed session left in line", n)
	}
}

// startPgBouncer starts a transaction-pooling PgBouncer (pool poolSize) in
// front of the server named by the PG* variables, on a free loopback port,
// for the length of the test, and returns a connection string through it.
func startPgBouncer(t *testing.T, poolSize int) string {
	t.Helper()
	const binary = "/usr/sbin/pgbouncer"
	if _, err := os.Stat(binary); err != nil {
		t.Skipf("PgBouncer is not installed (%s)", binary)
	}
	var args []string
	if os.Geteuid() == 0 { // PgBouncer refuses to run as root
		if _, err := user.Lookup("postgres"); err != nil {
			t.Skip("running as root and there is no user postgres to run PgBouncer as")
		}
		args = append(args, "-u", "postgres")
	}
	server, err := pgx.ParseConfig("")
	if err != nil {
		t.Fatal(err)
	}
	host := server.Host
	if host == "localhost" {
		host = "127.0.0.1"
	}
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil { // readable by the user PgBouncer runs as
		t.Fatal(err)
	}
	free, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := free.Addr().(*net.TCPAddr).Port
	free.Close()
	quote := func(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
	ini := filepath.Join(dir, "pgbouncer.ini")
	if err := os.WriteFile(ini, []byte(fmt.Sprintf(`[databases]
app = host=%s port=%d dbname=%s user=%s password=%s

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = any
pool_mode = transaction
default_pool_size = %d
max_client_conn = 500
`, quote(host), server.Port, quote(server.Database), quote(server.User), quote(server.Password), port, poolSize)), 0o644); err != nil {
		t.Fatal(err)
	}
	logFile, err := os.Create(filepath.Join(dir, "pgbouncer.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(binary, append(args, ini)...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		logFile.Close()
		if t.Failed() {
			if log, err := os.ReadFile(logFile.Name()); err == nil {
				t.Logf("PgBouncer's log:\n%s", log)
			}
		}
	})
	pooled := fmt.Sprintf("host=127.0.0.1 port=%d dbname=app user=%s", port, server.User)
	if !eventually(10*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, pooled+" statement_cache_mode=describe")
		if err != nil {
			return false
		}
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, "SELECT 1")
		return err == nil
	}) {
		t.Fatalf("PgBouncer does not answer on port %d", port)
	}
	return pooled
}

// A fleet through a transaction-pooling PgBouncer with a pool of 5: a
// leader with a short ttl keeps renewing its lease while 40 candidates
// campaign for 15 s, each in a session of its own, all through the pooler.
// Waiting in CALL fencing_await, 5 candidates would take the pool and the
// leader's renewals would queue behind them until its lease ran out. In
// line, the leader never loses its lease and the server never has more
// backends than the pool; when it resigns the candidates lead one after
// the other, each for 300 ms, in the order they joined, never two at once;
// and when the campaigns end, those that gave up leave nothing: no place
// in line, no lease.
func TestAFleetWaitsInLineThroughATransactionPooler(t *testing.T) {
	const poolSize, candidates = 5, 40
	pooled := startPgBouncer(t, poolSize)
	ctx, db, name := testCtx(t), connectDB(t), uniqueName(t)
	client, err := New(pooled)
	if err != nil {
		t.Fatal(err)
	}
	closeLater := func(s *Session) {
		t.Cleanup(func() {
			closeCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_, _ = s.Close(closeCtx)
		})
	}
	var leaderLost atomic.Int32
	leaderSession, err := client.NewSession(ctx, SessionOptions{TTL: 2 * time.Second, Holder: "leader",
		OnLost: func(string) { leaderLost.Add(1) }})
	if err != nil {
		t.Fatal(err)
	}
	closeLater(leaderSession)
	leaderElection := NewElection(leaderSession, name)
	leaderLease, err := leaderElection.Campaign(ctx, `{"who": "leader"}`)
	if err != nil {
		t.Fatal(err)
	}

	sessions := make([]*Session, candidates)
	elections := make([]*Election, candidates)
	ids := make([]int64, candidates)
	who := map[int64]int{}
	for i := range sessions {
		if sessions[i], err = client.NewSession(ctx, SessionOptions{TTL: 3 * time.Second, Holder: fmt.Sprintf("c%d", i)}); err != nil {
			t.Fatal(err)
		}
		closeLater(sessions[i])
		elections[i] = NewElection(sessions[i], name)
		ids[i] = sessions[i].ID()
		who[ids[i]] = i
	}

	// Never two leaders: sampled on the client side all along.
	var mostLeaders atomic.Int32
	sampling, stopSampling := context.WithCancel(ctx)
	defer stopSampling()
	go func() {
		for sampling.Err() == nil {
			leading := int32(0)
			if leaderElection.IsLeader() {
				leading++
			}
			for _, e := range elections {
				if e.IsLeader() {
					leading++
				}
			}
			if leading > mostLeaders.Load() {
				mostLeaders.Store(leading)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()

	type term struct {
		who             int
		token           Token
		won, resigning  time.Time
		resignedWithErr error
	}
	var mu sync.Mutex
	var terms []term
	results := make([]error, candidates)
	campaignCtx, endCampaigns := context.WithTimeout(ctx, 15*time.Second)
	defer endCampaigns()
	var wg sync.WaitGroup
	for i := range elections {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			lease, err := elections[i].Campaign(campaignCtx, fmt.Sprintf(`{"who": %d}`, i))
			if err != nil {
				results[i] = err
				return
			}
			won := time.Now()
			time.Sleep(300 * time.Millisecond)
			resigning := time.Now()
			resignCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err = elections[i].Resign(resignCtx)
			cancel()
			mu.Lock()
			terms = append(terms, term{i, lease.Token(), won, resigning, err})
			mu.Unlock()
		}(i)
	}
	if !eventually(10*time.Second, func() bool {
		return queryValue[int64](t, db, "SELECT count(*) FROM fencing_line WHERE session_id = ANY($1) AND token IS NULL", ids) == candidates
	}) {
		t.Fatalf("%d of %d candidates have a place in line",
			queryValue[int64](t, db, "SELECT count(*) FROM fencing_line WHERE session_id = ANY($1)", ids), candidates)
	}
	joined := time.Now()

	// The leader keeps its lease (ttl 2 s, renewed through the pooler) for
	// 6 s, and the server never has more backends than the pool.
	var mostBackends int64
	for time.Since(joined) < 6*time.Second {
		if leader, err := client.Leader(ctx, name); err != nil || leader == nil || leader.Token != leaderLease.Token() {
			t.Fatalf("the leader lost its lease while %d candidates wait: %+v, %v", candidates, leader, err)
		}
		if !leaderLease.Held() {
			t.Fatalf("the leader's lease is not held on the client: %v", leaderLease.Err())
		}
		backends := queryValue[int64](t, db, "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()")
		if backends > mostBackends {
			mostBackends = backends
		}
		time.Sleep(250 * time.Millisecond)
	}
	if mostBackends > poolSize {
		t.Errorf("%d server backends for the fleet, more than the pool's %d", mostBackends, poolSize)
	}
	if n := leaderLost.Load(); n != 0 {
		t.Fatalf("the leader's session was reported lost %d times", n)
	}
	var order []int
	rows, err := db.Query(ctx, "SELECT session_id FROM fencing_line WHERE session_id = ANY($1) ORDER BY place", ids)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		order = append(order, who[id])
	}
	if rows.Err() != nil {
		t.Fatal(rows.Err())
	}
	resigned := time.Now()
	if err := leaderElection.Resign(ctx); err != nil {
		t.Fatalf("the leader's resignation: %v", err)
	}

	wg.Wait()
	stopSampling()
	sort.Slice(terms, func(a, b int) bool { return terms[a].won.Before(terms[b].won) })
	if len(terms) < 2 {
		t.Fatalf("%d candidates led after the leader resigned, in %v", len(terms), time.Since(resigned))
	}
	previousEnd, previousToken := resigned, leaderLease.Token()
	for k, term := range terms {
		if term.who != order[k] {
			t.Errorf("term %d went to c%d, but c%d joined the line before it (order %v)", k, term.who, order[k], order[:len(terms)])
		}
		if !term.won.After(previousEnd) || term.token <= previousToken {
			t.Errorf("term %d (c%d, token %d) began before the one before it ended (token %d)", k, term.who, term.token, previousToken)
		}
		if term.resignedWithErr != nil {
			t.Errorf("c%d's resignation: %v", term.who, term.resignedWithErr)
		}
		previousEnd, previousToken = term.resigning, term.token
	}
	if n := mostLeaders.Load(); n > 1 {
		t.Errorf("%d candidates said they led at once", n)
	}
	gaveUp := 0
	for i, err := range results {
		if err == nil {
			continue
		}
		gaveUp++
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("c%d's campaign ended with %v", i, err)
		}
	}
	if gaveUp+len(terms) != candidates || gaveUp == 0 {
		t.Errorf("%d candidates led and %d gave up, of %d", len(terms), gaveUp, candidates)
	}
	// Before the sessions close (which would take their places with them).
	if n := queryValue[int64](t, db, "SELECT count(*) FROM fencing_line WHERE session_id = ANY($1)", append(ids, leaderSession.ID())); n != 0 {
		t.Errorf("%d places left in line after every candidate gave up or resigned", n)
	}
	if n := queryValue[int64](t, db, "SELECT count(*) FROM fencing_leases WHERE state = 'live' AND (lock_name = $1 OR session_id = ANY($2))", name, ids); n != 0 {
		t.Errorf("%d live leases after every candidate gave up or resigned", n)
	}
	t.Logf("%d candidates through a pool of %d: at most %d server backends while they waited; the leader kept its lease %v; "+
		"after its resignation %d led in turn, in the order they joined, and %d gave up",
		candidates, poolSize, mostBackends, resigned.Sub(joined).Round(time.Second), len(terms), gaveUp)
	for i, s := range sessions {
		if !s.Held() {
			t.Errorf("c%d's session was lost: %v", i, s.Err())
		}
	}
}
