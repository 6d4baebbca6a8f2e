package fencing

// The processes the tests start: this test binary run again with
// PG_FENCING_TEST_CHILD naming the role (startChild).

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v4"
)

func runChild(role string, args []string) int {
	var err error
	switch role {
	case "pause":
		err = pauseHolder(args[0], args[1])
	case "candidate":
		err = candidate(args[0], args[1], args[2])
	default:
		err = fmt.Errorf("unknown child role %q", role)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, role+":", err)
		return 1
	}
	return 0
}

// pauseHolder is the pause scenario's holder A: it takes the lock, checks
// it, says "ready TOKEN" and waits for a line; the test stops it (SIGSTOP)
// meanwhile, lets its lease run out and another holder write, then resumes
// it. A then writes with its token, as a client that checked before the
// pause has every reason to, and says what the database answered.
func pauseHolder(lockName, table string) error {
	ctx := context.Background()
	client, err := New("")
	if err != nil {
		return err
	}
	db, err := pgx.Connect(ctx, "")
	if err != nil {
		return err
	}
	lease, err := client.Acquire(ctx, lockName, LeaseOptions{TTL: time.Second})
	if err != nil {
		return err
	}
	defer lease.Release(ctx)
	if err := lease.Err(); err != nil {
		return err
	}
	fmt.Println("ready", lease.Token())
	bufio.NewReader(os.Stdin).ReadString('\n') // stopped here, then resumed
	_, err = FencedExec(ctx, db, fmt.Sprintf("UPDATE %s SET token = $1, v = 'A' WHERE id = 1", pgx.Identifier{table}.Sanitize()),
		lease.Token())
	var guard *GuardError
	switch {
	case err == nil:
		fmt.Println("accepted")
	case errors.As(err, &guard):
		fmt.Println("rejected", guard.SQLState)
	default:
		fmt.Println("failed", err)
	}
	return nil
}

// candidate campaigns in a session of its own (holder me, ttl 1 s), says
// "leader TOKEN" once it leads, and writes under its token every 100 ms
// until its lease is lost; it resigns and ends when stdin closes.
func candidate(lockName, table, me string) error {
	ctx := context.Background()
	client, err := New("")
	if err != nil {
		return err
	}
	db, err := pgx.Connect(ctx, "")
	if err != nil {
		return err
	}
	session, err := client.NewSession(ctx, SessionOptions{TTL: time.Second, Holder: me})
	if err != nil {
		return err
	}
	stdinClosed := make(chan struct{})
	go func() {
		bufio.NewReader(os.Stdin).ReadString('\n')
		close(stdinClosed)
	}()
	election := NewElection(session, lockName)
	update := fmt.Sprintf("UPDATE %s SET token = $1, v = $2 WHERE id = 1", pgx.Identifier{table}.Sanitize())
	for {
		lease, err := election.Campaign(ctx, "")
		if err != nil {
			return err
		}
		fmt.Println("leader", lease.Token())
		for lease.Held() {
			if _, err := lease.Exec(ctx, db, update, lease.Token(), me); err != nil {
				if errors.Is(err, ErrLeaseLost) || errors.Is(err, ErrStaleToken) {
					break
				}
				return err
			}
			select {
			case <-stdinClosed:
				_ = election.Resign(ctx)
				_, _ = session.Close(ctx)
				return nil
			case <-time.After(100 * time.Millisecond):
			}
		}
		if !session.Held() {
			return fmt.Errorf("%s: session lost: %v", me, session.Err())
		}
	}
}
