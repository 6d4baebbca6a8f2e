package fencing

// pg_fencing's Go client against a live server: the conformance scenarios
// of clients/README.md, and the API.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgconn"
	"github.com/jackc/pgx/v4"
)

func TestLeaseGivesATokenAndReleases(t *testing.T) {
	ctx, client, db, name := testCtx(t), newClient(t), connectDB(t), uniqueName(t)
	lease, err := client.Acquire(ctx, name, LeaseOptions{TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if !lease.Held() || lease.Token() <= 0 {
		t.Fatalf("a new lease: held %v, token %d", lease.Held(), lease.Token())
	}
	if leader, err := client.Leader(ctx, name); err != nil || leader == nil || leader.Token != lease.Token() {
		t.Fatalf("the leader is the lease's holder: %+v, %v", leader, err)
	}
	if _, err := client.Acquire(ctx, name, LeaseOptions{}); !errors.Is(err, ErrLockTimeout) {
		t.Fatalf("one attempt at a held lock: %v", err)
	}
	started := time.Now()
	_, err = client.Acquire(ctx, name, LeaseOptions{Wait: 300 * time.Millisecond})
	if !errors.Is(err, ErrLockTimeout) || !strings.Contains(err.Error(), name) {
		t.Fatalf("a wait that runs out: %v", err)
	}
	if waited := time.Since(started); waited < 250*time.Millisecond {
		t.Fatalf("it did not wait: %v", waited)
	}
	if ours, err := lease.Release(ctx); !ours || err != nil {
		t.Fatalf("release: %v, %v", ours, err)
	}
	if ours, _ := lease.Release(ctx); ours {
		t.Fatal("a second release said the lease was still ours")
	}
	if err := lease.Err(); !errors.Is(err, ErrLeaseLost) || !strings.Contains(err.Error(), "released") {
		t.Fatalf("after release: %v", err)
	}
	select {
	case <-lease.Done():
	default:
		t.Fatal("Done is not closed after release")
	}
	if state := queryValue[string](t, db, "SELECT state FROM fencing_leases WHERE lock_name = $1", name); state != "released" {
		t.Fatalf("state on the server: %s", state)
	}
	again, err := client.Acquire(ctx, name, LeaseOptions{TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer again.Release(ctx)
	if again.Token() <= lease.Token() {
		t.Fatalf("the next grant's token %d is not above %d", again.Token(), lease.Token())
	}
}

func TestFencedWritesMapTheGuardsRefusals(t *testing.T) {
	ctx, client, db, name := testCtx(t), newClient(t), connectDB(t), uniqueName(t)
	protectedTable(t, db, name, name)
	update := fmt.Sprintf("UPDATE %s SET token = $1, v = $2 WHERE id = 1", name)
	first, err := client.Acquire(ctx, name, LeaseOptions{TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if tag, err := first.Exec(ctx, db, update, first.Token(), "first"); err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("a fenced write: %v, %v", tag, err)
	}
	_, err = first.Exec(ctx, db, fmt.Sprintf("UPDATE %s SET v = 'no token' WHERE id = 1", name))
	var pgErr *pgconn.PgError
	if !errors.Is(err, ErrMissingToken) || !errors.As(err, &pgErr) || pgErr.Code != "55Z02" {
		t.Fatalf("a write without the token: %v", err)
	}
	first.Release(ctx)
	counted := &countingBeginner{db: db}
	if _, err := first.Exec(ctx, counted, update, first.Token(), "after release"); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("a write after release: %v", err)
	}
	if counted.begins != 0 {
		t.Fatal("a write under a lease known lost was sent")
	}
	second, err := client.Acquire(ctx, name, LeaseOptions{TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer second.Release(ctx)
	if _, err := second.Exec(ctx, db, update, second.Token(), "second"); err != nil {
		t.Fatal(err)
	}
	_, err = FencedExec(ctx, db, update, first.Token(), "stale")
	var guard *GuardError
	if !errors.Is(err, ErrStaleToken) || !errors.As(err, &guard) || guard.SQLState != "55Z01" ||
		!errors.As(err, &pgErr) || pgErr.Code != "55Z01" {
		t.Fatalf("a stale write: %v", err)
	}
	_, err = FencedExec(ctx, db, update, Token(9000000000000000000), "forged")
	if !errors.Is(err, ErrNeverGrantedToken) || errors.Is(err, ErrStaleToken) || !strings.Contains(err.Error(), "never granted") {
		t.Fatalf("a token never granted: %v", err)
	}
	if v := queryValue[string](t, db, fmt.Sprintf("SELECT v FROM %s", name)); v != "second" {
		t.Fatalf("the row has %q", v)
	}
}

// countingBeginner counts the transactions begun through it.
type countingBeginner struct {
	db     *pgx.Conn
	begins int
}

func (c *countingBeginner) Begin(ctx context.Context) (pgx.Tx, error) {
	c.begins++
	return c.db.Begin(ctx)
}

func TestLeaseLossIsReportedOnce(t *testing.T) {
	ctx, client, db, name := testCtx(t), newClient(t), connectDB(t), uniqueName(t)
	var mu sync.Mutex
	var reasons []string
	lease, err := client.Acquire(ctx, name, LeaseOptions{TTL: 3 * time.Second, Heartbeat: 200 * time.Millisecond,
		OnLost: func(reason string) { mu.Lock(); reasons = append(reasons, reason); mu.Unlock() }})
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(ctx)
	mustExec(t, db, "SELECT fencing_revoke($1, 'test')", name)
	select {
	case <-lease.Done():
	case <-time.After(3 * time.Second):
		t.Fatal("the loss was not reported")
	}
	time.Sleep(600 * time.Millisecond) // renewals would have come in this time
	mu.Lock()
	defer mu.Unlock()
	if len(reasons) != 1 || !strings.Contains(reasons[0], "refused") {
		t.Fatalf("OnLost calls: %q", reasons)
	}
	if lease.Held() || !errors.Is(lease.Err(), ErrLeaseLost) {
		t.Fatalf("after the loss: held %v, %v", lease.Held(), lease.Err())
	}
}

func TestAPausedProcessWakesUpToHeldFalse(t *testing.T) {
	ctx, client, name := testCtx(t), newClient(t), uniqueName(t)
	lease, err := client.Acquire(ctx, name, LeaseOptions{TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(ctx)
	lease.beat.stop() // as if the heartbeat had been frozen with the process
	if !lease.Held() {
		t.Fatal("not held just after the grant")
	}
	time.Sleep(time.Second)
	if lease.Held() {
		t.Fatal("held after its ttl without a renewal: not judged on the monotonic clock")
	}
}

func TestPauseScenarioTheStaleWriteBounces(t *testing.T) {
	ctx, client, db, name := testCtx(t), newClient(t), connectDB(t), uniqueName(t)
	protectedTable(t, db, name, name)
	holder := startChild(t, "pause", name, name)
	fields := strings.Fields(holder.readLine(t, 15*time.Second))
	if len(fields) != 2 || fields[0] != "ready" {
		t.Fatalf("the holder said %q", fields)
	}
	token, _ := strconv.ParseInt(fields[1], 10, 64)
	pid := holder.cmd.Process.Pid
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil { // between its check and its write
		t.Fatal(err)
	}
	defer syscall.Kill(pid, syscall.SIGCONT)
	successor, err := client.Acquire(ctx, name, LeaseOptions{TTL: 5 * time.Second, Wait: 10 * time.Second}) // A's lease runs out meanwhile
	if err != nil {
		t.Fatal(err)
	}
	defer successor.Release(ctx)
	if int64(successor.Token()) <= token {
		t.Fatalf("the successor's token %d is not above %d", successor.Token(), token)
	}
	if _, err := successor.Exec(ctx, db, fmt.Sprintf("UPDATE %s SET token = $1, v = 'B' WHERE id = 1", name), successor.Token()); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	holder.stdin.Write([]byte("go\n"))
	if answer := holder.readLine(t, 10*time.Second); answer != "rejected 55Z01" {
		t.Fatalf("the paused holder's write: %q", answer)
	}
	if v := queryValue[string](t, db, fmt.Sprintf("SELECT v FROM %s", name)); v != "B" {
		t.Fatalf("the row has %q", v)
	}
}

func TestElectionWithThreeCandidatesAndAKilledLeader(t *testing.T) {
	ctx, client, db, name := testCtx(t), newClient(t), connectDB(t), uniqueName(t)
	protectedTable(t, db, name, name)
	type said struct {
		who   int
		token Token
	}
	leaders := make(chan said, 10)
	candidates := make([]*child, 3)
	for i := range candidates {
		candidates[i] = startChild(t, "candidate", name, name, fmt.Sprintf("c%d", i))
		go func(i int, c *child) {
			for line := range c.lines {
				if fields := strings.Fields(line); len(fields) == 2 && fields[0] == "leader" {
					n, _ := strconv.ParseInt(fields[1], 10, 64)
					leaders <- said{i, Token(n)}
				}
			}
		}(i, candidates[i])
	}
	nextLeader := func(timeout time.Duration) said {
		select {
		case s := <-leaders:
			return s
		case <-time.After(timeout):
			t.Fatalf("no leader within %v", timeout)
		}
		return said{}
	}
	first := nextLeader(20 * time.Second)
	if leader, err := client.Leader(ctx, name); err != nil || leader == nil || leader.Token != first.token ||
		leader.Holder != fmt.Sprintf("c%d", first.who) {
		t.Fatalf("the leader as the database sees it: %+v, %v (candidate c%d said %d)", leader, err, first.who, first.token)
	}
	if err := candidates[first.who].cmd.Process.Kill(); err != nil { // kill -9: its session is left to run out
		t.Fatal(err)
	}
	candidates[first.who].cmd.Wait()
	second := nextLeader(10 * time.Second)
	if second.who == first.who || second.token <= first.token {
		t.Fatalf("after c%d (token %d): c%d with token %d", first.who, first.token, second.who, second.token)
	}
	if !eventually(3*time.Second, func() bool {
		return queryValue[int64](t, db, fmt.Sprintf("SELECT token::bigint FROM %s", name)) == int64(second.token)
	}) {
		t.Fatal("the new leader's writes do not land")
	}
	_, err := FencedExec(ctx, db, fmt.Sprintf("UPDATE %s SET token = $1, v = 'ghost' WHERE id = 1", name), first.token)
	if !errors.Is(err, ErrStaleToken) {
		t.Fatalf("the dead leader's token: %v", err)
	}
}

// collect gathers what an observer sends.
type collected struct {
	mu   sync.Mutex
	seen []*Leader
	done chan struct{}
}

func collect(changes <-chan *Leader) *collected {
	c := &collected{done: make(chan struct{})}
	go func() {
		defer close(c.done)
		for leader := range changes {
			c.mu.Lock()
			c.seen = append(c.seen, leader)
			c.mu.Unlock()
		}
	}()
	return c
}

func (c *collected) snapshot() []*Leader {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*Leader(nil), c.seen...)
}

func (c *collected) lastIs(holder string) func() bool {
	return func() bool {
		seen := c.snapshot()
		return len(seen) > 0 && seen[len(seen)-1] != nil && seen[len(seen)-1].Holder == holder
	}
}

func TestObserveFollowsTheLeaderAndIgnoresAForgedNotification(t *testing.T) {
	ctx, client, db, name := testCtx(t), newClient(t), connectDB(t), uniqueName(t)
	mustExec(t, db, "SELECT fencing_create_lock($1)", name)
	mustExec(t, db, "SELECT fencing_set_announce($1, true)", name)
	session, err := client.NewSession(ctx, SessionOptions{TTL: 5 * time.Second, Holder: "observed"})
	if err != nil {
		t.Fatal(err)
	}
	defer session.Close(ctx)
	election := NewElection(session, name)
	lease, err := election.Campaign(ctx, `{"addr": "10.0.0.1:1"}`)
	if err != nil {
		t.Fatal(err)
	}
	observeCtx, stop := context.WithCancel(ctx)
	defer stop()
	seen := collect(client.Observe(observeCtx, name, time.Minute))
	if !eventually(5*time.Second, seen.lastIs("observed")) {
		t.Fatalf("the observer reported %v", seen.snapshot())
	}
	first := seen.snapshot()[0]
	var payload map[string]string
	if err := json.Unmarshal([]byte(first.Payload), &payload); err != nil || first.Token != lease.Token() || payload["addr"] != "10.0.0.1:1" {
		t.Fatalf("first report %+v (%v)", first, err)
	}
	forged, _ := json.Marshal(map[string]interface{}{"lock_name": name, "event": "granted", "holder": "mallory", "token": 1})
	mustExec(t, db, "SELECT pg_notify('fencing_events', $1)", string(forged))
	time.Sleep(500 * time.Millisecond)
	if got := seen.snapshot(); len(got) != 1 {
		t.Fatalf("a forged notification changed what it reports: %v", got)
	}
	if err := election.Proclaim(ctx, `{"addr": "10.0.0.1:2"}`); err != nil {
		t.Fatal(err)
	}
	if leader, err := election.Leader(ctx); err != nil || !strings.Contains(leader.Payload, "10.0.0.1:2") || leader.Token != lease.Token() {
		t.Fatalf("after the proclamation: %+v, %v", leader, err)
	}
	time.Sleep(300 * time.Millisecond)
	if got := seen.snapshot(); len(got) != 1 {
		t.Fatalf("a proclamation is no change of leader: %v", got)
	}
	if err := election.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	nextSession, err := client.NewSession(ctx, SessionOptions{TTL: 5 * time.Second, Holder: "next"})
	if err != nil {
		t.Fatal(err)
	}
	defer nextSession.Close(ctx)
	successor := NewElection(nextSession, name)
	next, err := successor.Campaign(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if !eventually(5*time.Second, seen.lastIs("next")) {
		t.Fatalf("the observer reported %v", seen.snapshot())
	}
	got := seen.snapshot()
	if got[len(got)-1].Token != next.Token() || next.Token() <= lease.Token() {
		t.Fatalf("the successor's token: %v, lease %d", got[len(got)-1], next.Token())
	}
	for _, leader := range got {
		if leader != nil && leader.Holder == "mallory" {
			t.Fatalf("the forged holder was reported: %v", got)
		}
	}
	stop()
	select {
	case <-seen.done:
	case <-time.After(5 * time.Second):
		t.Fatal("the observer's channel did not close when its context ended")
	}
}

func TestObserveReconnectsAfterItsConnectionIsTerminated(t *testing.T) {
	ctx, client, db, name := testCtx(t), newClient(t), connectDB(t), uniqueName(t)
	observeCtx, stop := context.WithCancel(ctx)
	defer stop()
	seen := collect(client.Observe(observeCtx, name, time.Minute))
	if !eventually(5*time.Second, func() bool { return len(seen.snapshot()) == 1 }) || seen.snapshot()[0] != nil {
		t.Fatalf("the observer reported %v", seen.snapshot())
	}
	// Taken while the observer sleeps (not announced: no notification, and
	// the next periodic read is a minute away) ...
	lease, err := client.Acquire(ctx, name, LeaseOptions{TTL: 10 * time.Second, Holder: "after"})
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(ctx)
	time.Sleep(200 * time.Millisecond)
	if got := seen.snapshot(); len(got) != 1 {
		t.Fatalf("reported without a read: %v", got)
	}
	// ... then its connection is cut: it reconnects and reads again.
	if n := queryValue[int64](t, db, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "+
		"WHERE application_name = 'pg_fencing observe'"); n != 1 {
		t.Fatalf("%d observer connections terminated", n)
	}
	if !eventually(10*time.Second, seen.lastIs("after")) {
		t.Fatalf("no change reported after the reconnect: %v", seen.snapshot())
	}
	if got := seen.snapshot(); got[len(got)-1].Token != lease.Token() {
		t.Fatalf("reported %v, the lease has %d", got, lease.Token())
	}
}

func TestCancellingAWaitEndsItOnTheServer(t *testing.T) {
	ctx, client, db, name := testCtx(t), newClient(t), connectDB(t), uniqueName(t)
	holder, err := client.Acquire(ctx, name, LeaseOptions{TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Release(ctx)
	waiting := func() int64 {
		return queryValue[int64](t, db, "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'CALL fencing_await%' "+
			"AND state = 'active' AND application_name = 'pg_fencing lease waiter'")
	}
	waitCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	result := make(chan error, 1)
	go func() {
		_, err := client.Acquire(waitCtx, name, LeaseOptions{TTL: 5 * time.Second, Wait: time.Minute, Holder: "waiter"})
		result <- err
	}()
	if !eventually(5*time.Second, func() bool { return waiting() == 1 }) {
		t.Fatal("the wait is not on the server")
	}
	time.Sleep(200 * time.Millisecond) // asleep between attempts
	if !queryValue[bool](t, db, "SELECT bool_and(backend_xmin IS NULL AND backend_xid IS NULL) FROM pg_stat_activity "+
		"WHERE query LIKE 'CALL fencing_await%' AND application_name = 'pg_fencing lease waiter'") {
		t.Fatal("it waits holding a snapshot or a transaction id")
	}
	cancel()
	select {
	case err := <-result:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("the cancelled wait returned %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("cancelling the context did not end the wait")
	}
	if !eventually(5*time.Second, func() bool { return waiting() == 0 }) {
		t.Fatal("the cancelled wait goes on on the server")
	}
	if leader, err := client.Leader(ctx, name); err != nil || leader == nil || leader.Token != holder.Token() {
		t.Fatalf("the holder lost its lock: %v, %v", leader, err)
	}
	// A deadline ends a mutex's wait too.
	session, err := client.NewSession(ctx, SessionOptions{TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer session.Close(ctx)
	deadlineCtx, cancelDeadline := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancelDeadline()
	if _, err := NewMutex(session, name).Lock(deadlineCtx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a mutex's wait past its deadline: %v", err)
	}
	// Its wait was a place in line (1.10): left at the deadline.
	if n := queryValue[int64](t, db, "SELECT count(*) FROM fencing_line WHERE session_id = $1", session.ID()); n != 0 {
		t.Fatalf("the mutex's wait left %d places in line past its deadline", n)
	}
}

func TestSessionLocksManyAndLosesThemTogether(t *testing.T) {
	ctx, client, db, name := testCtx(t), newClient(t), connectDB(t), uniqueName(t)
	var mu sync.Mutex
	var reasons []string
	session, err := client.NewSession(ctx, SessionOptions{TTL: 3 * time.Second, Heartbeat: 200 * time.Millisecond,
		OnLost: func(reason string) { mu.Lock(); reasons = append(reasons, reason); mu.Unlock() }})
	if err != nil {
		t.Fatal(err)
	}
	defer session.Close(ctx)
	part := NewMutex(session, name+"_p")
	if _, err := part.Lock(ctx); err != nil || !part.IsOwner() {
		t.Fatalf("lock: %v, owner %v", err, part.IsOwner())
	}
	both, err := session.LockAll(ctx, []string{name + "_b", name + "_a"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if both[0].LockName() != name+"_b" || both[1].LockName() != name+"_a" || !both[0].Held() || !both[1].Held() ||
		both[0].Token() == both[1].Token() {
		t.Fatalf("lock all: %v %v", both[0], both[1])
	}
	other, err := client.NewSession(ctx, SessionOptions{TTL: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.LockAll(ctx, []string{name + "_a", name + "_z"}, 0); !errors.Is(err, ErrLockTimeout) {
		t.Fatalf("lock all with one busy: %v", err)
	}
	if n := queryValue[int64](t, db, "SELECT count(*) FROM fencing_leases WHERE lock_name = $1 AND live", name+"_z"); n != 0 {
		t.Fatal("lock all took some: not all or none")
	}
	if _, err := NewMutex(other, name+"_p").TryLock(ctx); !errors.Is(err, ErrLockTimeout) {
		t.Fatalf("try lock of a held lock: %v", err)
	}
	if n, err := other.Close(ctx); n != 0 || err != nil {
		t.Fatalf("closing a session without leases: %d, %v", n, err)
	}
	if err := part.Unlock(ctx); err != nil || part.IsOwner() || !both[0].Held() {
		t.Fatalf("unlock: %v, owner %v, the others held %v", err, part.IsOwner(), both[0].Held())
	}
	mustExec(t, db, "SELECT fencing_session_close($1::bigint)", session.ID()) // an operator ends it
	select {
	case <-session.Done():
	case <-time.After(3 * time.Second):
		t.Fatal("the session's loss was not reported")
	}
	time.Sleep(500 * time.Millisecond)
	mu.Lock()
	if len(reasons) != 1 {
		t.Errorf("OnLost calls: %q", reasons)
	}
	mu.Unlock()
	if both[0].Held() || both[1].Held() || !errors.Is(both[1].Err(), ErrLeaseLost) {
		t.Fatal("a lease in a lost session is held")
	}
	if _, err := session.TryLock(ctx, name+"_c"); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("a lock in a lost session: %v", err)
	}
	if _, err := part.Exec(ctx, db, "SELECT 1"); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("a write under a mutex not held: %v", err)
	}
}

func TestSemaphoreAndSharedLeases(t *testing.T) {
	ctx, client, name := testCtx(t), newClient(t), uniqueName(t)
	session, err := client.NewSession(ctx, SessionOptions{TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer session.Close(ctx)
	semaphore := NewSemaphore(session, name, 2)
	p1, err := semaphore.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p2, err := semaphore.TryAcquire(ctx)
	if err != nil || p1.Token() == p2.Token() {
		t.Fatalf("two permits: %v, %v %v", err, p1.Token(), p2.Token())
	}
	if _, err := client.Acquire(ctx, name, LeaseOptions{Kind: Permit, Permits: 2}); !errors.Is(err, ErrLockTimeout) ||
		!strings.Contains(err.Error(), "permits is taken") {
		t.Fatalf("a third permit: %v", err)
	}
	if ours, err := p1.Release(ctx); !ours || err != nil {
		t.Fatalf("release of a permit: %v, %v", ours, err)
	}
	p3, err := client.Acquire(ctx, name, LeaseOptions{Kind: Permit, Permits: 2, Wait: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	p3.Release(ctx)

	shared := name + "_rw"
	r1, err := client.Acquire(ctx, shared, LeaseOptions{Kind: Shared})
	if err != nil {
		t.Fatal(err)
	}
	r2, err := client.Acquire(ctx, shared, LeaseOptions{Kind: Shared})
	if err != nil || !r1.Held() || !r2.Held() {
		t.Fatalf("two shared leases: %v", err)
	}
	if _, err := client.Acquire(ctx, shared, LeaseOptions{}); !errors.Is(err, ErrLockTimeout) {
		t.Fatalf("an exclusive lease beside shared ones: %v", err)
	}
	r1.Release(ctx)
	r2.Release(ctx)
	writer, err := client.Acquire(ctx, shared, LeaseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	writer.Release(ctx)
	if _, err := client.Acquire(ctx, shared, LeaseOptions{Kind: Shared, Payload: "{}"}); err == nil ||
		!strings.Contains(err.Error(), "payload needs an exclusive lease") {
		t.Fatalf("a payload on a shared lease: %v", err)
	}
}

// observerRole creates a LOGIN role for this test with password and
// options (CONNECTION LIMIT, say), dropped when the test ends.
func observerRole(t *testing.T, admin *pgx.Conn, password, options string) string {
	t.Helper()
	role := uniqueName(t) + "_observer"
	mustExec(t, admin, queryValue[string](t, admin, "SELECT format('CREATE ROLE %I LOGIN PASSWORD %L', $1::text, $2::text)",
		role, password)+" "+options)
	t.Cleanup(func() { mustExec(t, admin, "DROP ROLE "+pgx.Identifier{role}.Sanitize()) })
	return role
}

func TestObserveStopsOnAnErrorNoReconnectCanMend(t *testing.T) {
	ctx, admin, name := testCtx(t), connectDB(t), uniqueName(t)
	role := observerRole(t, admin, "the-right-one", "")
	client, err := New("user=" + role + " password=a-wrong-one") // roles' names are [a-z0-9_]
	if err != nil {
		t.Fatal(err)
	}
	observer := client.NewObserver(ctx, name, time.Minute)
	select {
	case leader, open := <-observer.Changes():
		if open {
			t.Fatalf("the observer with a wrong password reported %v", leader)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the observer with a wrong password is still trying after 5 s")
	}
	refused(t, "the observer's error", observer.Err(), "28P01")
	t.Log(observer.Err())
	// Observe is the same observer without the error: its channel closes too.
	select {
	case _, open := <-client.Observe(ctx, name, time.Minute):
		if open {
			t.Fatal("Observe with a wrong password reported a leader")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Observe with a wrong password is still trying after 5 s")
	}
}

func TestObserveRetriesARefusalThatMayPass(t *testing.T) {
	ctx, admin, name := testCtx(t), connectDB(t), uniqueName(t)
	password := "observer-" + name
	role := observerRole(t, admin, password, "CONNECTION LIMIT 0") // each connection: 53300
	client, err := New("user=" + role + " password=" + password)
	if err != nil {
		t.Fatal(err)
	}
	observeCtx, stop := context.WithCancel(ctx)
	defer stop()
	observer := client.NewObserver(observeCtx, name, time.Minute)
	seen := collect(observer.Changes())
	time.Sleep(time.Second)
	select {
	case <-seen.done:
		t.Fatalf("the observer stopped on too many connections (53300): %v", observer.Err())
	default:
	}
	if got := seen.snapshot(); len(got) != 0 {
		t.Fatalf("the observer read the leader despite CONNECTION LIMIT 0: %v", got)
	}
	mustExec(t, admin, "ALTER ROLE "+pgx.Identifier{role}.Sanitize()+" CONNECTION LIMIT -1")
	if !eventually(10*time.Second, func() bool { return len(seen.snapshot()) == 1 }) || seen.snapshot()[0] != nil {
		t.Fatalf("once it may connect, the observer reported %v (%v)", seen.snapshot(), observer.Err())
	}
	stop()
	select {
	case <-seen.done:
	case <-time.After(5 * time.Second):
		t.Fatal("the observer's channel did not close when its context ended")
	}
	if err := observer.Err(); err != nil {
		t.Fatalf("an observer stopped by its context: %v", err)
	}
}
