package fencing

// The tests run against a live server named by the PG* variables (say,
// inside scripts/lib.sh's with_throwaway_cluster), as a role that may create
// the extension and revoke leases (the cluster's superuser). Processes of
// their own (the pause scenario's holder, the election's candidates) are
// this test binary run again with PG_FENCING_TEST_CHILD set.

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v4"
)

const childEnv = "PG_FENCING_TEST_CHILD"

func TestMain(m *testing.M) {
	if role := os.Getenv(childEnv); role != "" {
		os.Exit(runChild(role, childArgs()))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	conn, err := pgx.Connect(ctx, "")
	if err == nil {
		_, err = conn.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_fencing")
		conn.Close(ctx)
	}
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "pg_fencing tests need a server named by the PG* variables:", err)
		os.Exit(2)
	}
	os.Exit(m.Run())
}

// childArgs are the arguments after "--" (startChild's).
func childArgs() []string {
	for i, arg := range os.Args {
		if arg == "--" {
			return os.Args[i+1:]
		}
	}
	return nil
}

// testCtx is a context that ends with the test, bounded so that no wait hangs.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func newClient(t *testing.T) *Client {
	client, err := New("")
	if err != nil {
		t.Fatal(err)
	}
	return client
}

// connectDB is a plain connection for the test's own statements.
func connectDB(t *testing.T) *pgx.Conn {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// uniqueName is a lock or table name of this test's own.
func uniqueName(t *testing.T) string {
	random := make([]byte, 6)
	if _, err := rand.Read(random); err != nil {
		t.Fatal(err)
	}
	return "go_" + hex.EncodeToString(random)
}

func mustExec(t *testing.T, db *pgx.Conn, sql string, args ...interface{}) {
	t.Helper()
	if _, err := db.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func queryValue[T any](t *testing.T, db *pgx.Conn, sql string, args ...interface{}) T {
	t.Helper()
	var v T
	if err := db.QueryRow(context.Background(), sql, args...).Scan(&v); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return v
}

// protectedTable makes a table whose one row is written under lockName's
// lock-wide fence.
func protectedTable(t *testing.T, db *pgx.Conn, table, lockName string) {
	mustExec(t, db, fmt.Sprintf("CREATE TABLE %s (id int PRIMARY KEY, token fencing_token, v text)", pgx.Identifier{table}.Sanitize()))
	mustExec(t, db, fmt.Sprintf("INSERT INTO %s VALUES (1, NULL, 'initial')", pgx.Identifier{table}.Sanitize()))
	mustExec(t, db, "SELECT fencing_protect($1::regclass, lock_name => $2)", table, lockName)
}

// eventually polls cond every 20 ms until it holds or timeout passes.
func eventually(timeout time.Duration, cond func() bool) bool {
	end := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		if time.Now().After(end) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// child is this test binary run as a process of its own: lines on stdin,
// lines from stdout.
type child struct {
	cmd   *exec.Cmd
	stdin interface {
		Write([]byte) (int, error)
		Close() error
	}
	lines chan string
}

func startChild(t *testing.T, role string, args ...string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"-test.run=^$", "--"}, args...)...)
	cmd.Env = append(os.Environ(), childEnv+"="+role)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, stdin: stdin, lines: make(chan string, 100)}
	go func() {
		scanner := bufio.NewScanner(stdout)
		for scanner.Scan() {
			c.lines <- strings.TrimSpace(scanner.Text())
		}
		close(c.lines)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return c
}

func (c *child) readLine(t *testing.T, timeout time.Duration) string {
	t.Helper()
	select {
	case line, ok := <-c.lines:
		if !ok {
			t.Fatalf("pid %d ended without a line", c.cmd.Process.Pid)
		}
		return line
	case <-time.After(timeout):
		t.Fatalf("no line from pid %d within %v", c.cmd.Process.Pid, timeout)
	}
	return ""
}
