package fencing

// A wait whose context ends just after the server granted it: the grant is
// committed, but its answer never reaches the client. The race is made
// certain by a proxy between the waiter and the server that keeps the
// server's answers back: the test sees the grant committed (from a
// connection of its own), and only then ends the wait's context. A wait in
// a session is a place in line (1.10): the grant is made by a poll whose
// answer is kept back; a lease of its own waits in CALL fencing_await.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v4"
)

func TestAGrantWhoseAnswerIsLostWithTheContextIsGivenBack(t *testing.T) {
	ctx, client, db := testCtx(t), newClient(t), connectDB(t)
	// liveGrants counts the live grants of a lock to a session (or, with
	// session 0, to a holder outside any session).
	liveGrants := func(lockName string, session int64, holder string) int64 {
		owner := "session_id = $2"
		var ownerArg interface{} = session
		if session == 0 {
			owner, ownerArg = "session_id IS NULL AND holder = $2", holder
		}
		return queryValue[int64](t, db, "SELECT (SELECT count(*) FROM fencing_leases WHERE lock_name = $1 AND state = 'live' AND "+owner+
			") + (SELECT count(*) FROM fencing_permits WHERE lock_name = $1 AND state = 'live' AND "+owner+")", lockName, ownerArg)
	}

	t.Run("Mutex.Lock in a session", func(t *testing.T) {
		name, proxy := uniqueName(t), startAnswerHoldingProxy(t)
		blocker, err := client.Acquire(ctx, name, LeaseOptions{TTL: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		session := proxiedSession(t, proxy, "waiter-"+name)
		// The poll that takes the lock is the statement whose answer is
		// kept back: no answer is held before one says "granted" (holding
		// every answer from a point on could stop a poll sent before the
		// lock was freed, whose answer is "waiting", and no other poll
		// would follow).
		proxy.holdFrom = []byte("granted")
		loseTheAnswer(t, db, proxy, inLine(t, db, session),
			func(waitCtx context.Context) error { _, err := NewMutex(session, name).Lock(waitCtx); return err },
			func() { _, _ = blocker.Release(ctx) },
			func() int64 { return liveGrants(name, session.ID(), "") }, 0)
		if n := queryValue[int64](t, db, "SELECT count(*) FROM fencing_line WHERE session_id = $1", session.ID()); n != 0 {
			t.Fatalf("the cancelled wait left %d places in line", n)
		}
	})

	t.Run("Semaphore.Acquire in a session that holds a permit already", func(t *testing.T) {
		name, proxy := uniqueName(t), startAnswerHoldingProxy(t)
		session := proxiedSession(t, proxy, "waiter-"+name)
		semaphore := NewSemaphore(session, name, 2)
		first, err := semaphore.TryAcquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		blocker, err := client.Acquire(ctx, name, LeaseOptions{Kind: Permit, Permits: 2, TTL: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		proxy.holdFrom = []byte("granted") // as for the mutex: its place's poll takes the permit
		loseTheAnswer(t, db, proxy, inLine(t, db, session),
			func(waitCtx context.Context) error { _, err := semaphore.Acquire(waitCtx); return err },
			func() { _, _ = blocker.Release(ctx) },
			func() int64 { return liveGrants(name, session.ID(), "") }, 1)
		if !queryValue[bool](t, db, "SELECT EXISTS (SELECT FROM fencing_permits WHERE token::bigint = $1 AND state = 'live')", int64(first.Token())) {
			t.Fatal("the permit the session held before the wait was given back too")
		}
	})

	t.Run("a lease of its own", func(t *testing.T) {
		name, proxy := uniqueName(t), startAnswerHoldingProxy(t)
		blocker, err := client.Acquire(ctx, name, LeaseOptions{TTL: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		holder := "waiter-" + name
		loseTheAnswer(t, db, proxy, awaiting(t, db, "pg_fencing lease "+holder),
			func(waitCtx context.Context) error {
				lease, err := NewFromConfig(proxy.config).Acquire(waitCtx, name, LeaseOptions{TTL: 10 * time.Second, Wait: time.Minute, Holder: holder})
				if err == nil {
					_, _ = lease.Release(ctx)
				}
				return err
			},
			func() { _, _ = blocker.Release(ctx) },
			func() int64 { return liveGrants(name, 0, holder) }, 0)
	})
}

// awaiting: a CALL fencing_await of a connection named app sleeps on the
// server. It runs once its backend sleeps in it (wait event Extension:
// fencing_await on its latch). state = 'active' alone is not enough: pgx
// first prepares the statement (Parse, Describe, Sync), and the backend
// shows the CALL as active during that round trip too; holding its answer
// would keep pgx from ever sending the CALL itself.
func awaiting(t *testing.T, db *pgx.Conn, app string) func() bool {
	return func() bool {
		return queryValue[int64](t, db, "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 "+
			"AND query LIKE 'CALL fencing_await%' AND state = 'active' AND wait_event_type = 'Extension'", app) == 1
	}
}

// inLine: the session has a place in line that waits. Its next poll takes
// the lock once it is free.
func inLine(t *testing.T, db *pgx.Conn, session *Session) func() bool {
	return func() bool {
		return queryValue[int64](t, db, "SELECT count(*) FROM fencing_line WHERE session_id = $1 AND token IS NULL", session.ID()) == 1
	}
}

// loseTheAnswer runs wait until it waits on the server (onServer), holds
// the server's answers back, frees the lock, waits for the grant to be
// committed (grants() = before+1), ends wait's context and checks that wait
// returns the context's error and that grants() is back to before.
func loseTheAnswer(t *testing.T, db *pgx.Conn, proxy *answerHoldingProxy, onServer func() bool,
	wait func(context.Context) error, free func(), grants func() int64, before int64) {
	t.Helper()
	waitCtx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	result := make(chan error, 1)
	go func() { result <- wait(waitCtx) }()
	if !eventually(10*time.Second, onServer) {
		t.Fatal("the wait is not on the server")
	}
	proxy.hold()
	defer proxy.deliver() // before the session closes: its connections are held too
	free()
	if !eventually(10*time.Second, func() bool { return grants() == before+1 }) {
		t.Fatalf("the wait was not granted: %d live grants, %d before", grants(), before)
	}
	cancel()
	select {
	case err := <-result:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("the cancelled wait returned %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("cancelling the context did not end the wait")
	}
	if now := grants(); now != before {
		t.Fatalf("the grant the cancelled wait lost is still live: %d live grants, %d before the wait", now, before)
	}
}

// proxiedSession is a session (ttl 30 s, so that renewals held back by the
// proxy do not matter) whose connections go through proxy.
func proxiedSession(t *testing.T, proxy *answerHoldingProxy, holder string) *Session {
	session, err := NewFromConfig(proxy.config).NewSession(testCtx(t), SessionOptions{TTL: 30 * time.Second, Holder: holder})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = session.Close(ctx)
	})
	return session
}

// answerHoldingProxy passes bytes between clients and the server named by
// the PG* variables, until hold(): from then on, the server's answers on the
// connections open at that moment are kept back, as a slow network would,
// while what the clients send still goes through. Connections opened later
// pass freely. config connects through it.
type answerHoldingProxy struct {
	config   *pgx.ConnConfig
	listener net.Listener
	dial     func() (net.Conn, error)
	// holdFrom, when set before the connections open, makes hold() keep
	// back answers only from the first one containing these bytes on.
	holdFrom []byte

	mu    sync.Mutex
	conns []*proxiedConn
}

type proxiedConn struct {
	client, server net.Conn
	gate           chan struct{} // non-nil: answers wait until it is closed
	armed          bool          // hold() with holdFrom: the gate closes at the first answer containing it
}

func startAnswerHoldingProxy(t *testing.T) *answerHoldingProxy {
	config, err := pgx.ParseConfig("")
	if err != nil {
		t.Fatal(err)
	}
	network, address := "tcp", net.JoinHostPort(config.Host, fmt.Sprint(config.Port))
	if strings.HasPrefix(config.Host, "/") {
		network, address = "unix", filepath.Join(config.Host, fmt.Sprintf(".s.PGSQL.%d", config.Port))
	}
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := uint16(listener.Addr().(*net.TCPAddr).Port)
	config.Host, config.Port = "127.0.0.1", port
	for _, fallback := range config.Fallbacks {
		fallback.Host, fallback.Port = "127.0.0.1", port
	}
	p := &answerHoldingProxy{config: config, listener: listener,
		dial: func() (net.Conn, error) { return net.DialTimeout(network, address, 5*time.Second) }}
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *answerHoldingProxy) accept() {
	for {
		client, err := p.listener.Accept()
		if err != nil {
			return // closed
		}
		server, err := p.dial()
		if err != nil {
			client.Close()
			continue
		}
		c := &proxiedConn{client: client, server: server}
		p.mu.Lock()
		p.conns = append(p.conns, c)
		p.mu.Unlock()
		go func() {
			_, _ = io.Copy(server, client)
			server.Close()
		}()
		go p.answer(c)
	}
}

// answer copies the server's bytes to the client, waiting at a closed gate.
func (p *answerHoldingProxy) answer(c *proxiedConn) {
	defer c.client.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := c.server.Read(buf)
		if n > 0 {
			p.mu.Lock()
			if c.armed && bytes.Contains(buf[:n], p.holdFrom) {
				c.armed, c.gate = false, make(chan struct{})
			}
			gate := c.gate
			p.mu.Unlock()
			if gate != nil {
				<-gate
			}
			if _, err := c.client.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// hold keeps back the answers on every connection open now (with
// holdFrom: from the first answer containing it on).
func (p *answerHoldingProxy) hold() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		if p.holdFrom != nil {
			c.armed = true
		} else if c.gate == nil {
			c.gate = make(chan struct{})
		}
	}
}

// deliver lets every answer kept back through, and stops holding.
func (p *answerHoldingProxy) deliver() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.armed = false
		if c.gate != nil {
			close(c.gate)
			c.gate = nil
		}
	}
}

func (p *answerHoldingProxy) close() {
	p.deliver()
	p.listener.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.client.Close()
		c.server.Close()
	}
}
