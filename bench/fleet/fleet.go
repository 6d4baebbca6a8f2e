// Command fleet is bench/fleet.sh's driver (issue 43): one election with N
// candidates waiting, for pg_fencing's line through a transaction-pooling
// PgBouncer and for etcd's own election (clientv3/concurrency), measured the
// same way in the same run.  bench/fleet.sh builds it (GOPATH mode, offline,
// from Debian's packages) and runs it; the measuring process starts the
// candidate processes as copies of itself ("fleet pgcand", "fleet etcdcand",
// "fleet pgsess").  Each copy talks to the measuring process by lines: it
// reads commands on stdin (resign, listen, quit) and writes events on stdout
// (ready, granted, resigned, listening, lost, renew, err).
//
// What one run of "fleet measure" does, for -system pg or etcd and -n N:
//  1. baseline: the leader alone holds the lock (pg: a session of -ttl with
//     the first place in line; etcd: a session of -ttl that campaigned
//     first) and renews every ttl/3 on a client connection of its own,
//     timing each renewal (pg: SELECT fencing_session_renew($1) through
//     PgBouncer; etcd: KeepAliveOnce of its session's lease), for -window;
//  2. the fleet joins: N candidates in min(20, N) processes (pg: a session
//     each, a place each, renewed in one statement every ttl/3 and polled in
//     one statement every -poll, one pooled connection per process; etcd: a
//     session each on one shared client per process, campaigning);
//  3. fleet: the same renewals for -window with the fleet waiting;
//  4. hand-over: the leader resigns (pg: fencing_line_leave of its place;
//     etcd: Resign); whoever learns it leads (pg: its poll answers granted;
//     etcd: its Campaign returns) tells us, holds -hold plus up to -poll at
//     random, resigns and joins again at the back (each pg process polls
//     and renews at a phase of its own, chosen at random); -handovers times; each hand-over is from the
//     resign's return to the next leader knowing (the wall clock of this
//     machine, read by both processes);
//  5. pg only: the same with a direct connection per process LISTENing on
//     fencing_line; the process whose place the notification names (the
//     first waiting place) polls that place at once, as the clients do;
//     the time from the resign to its listener hearing the notification is
//     recorded too (heard), to tell the notification's part from the poll's.
//
// During 1 and 3 it samples the server: its client backends
// (pg_stat_activity), CPU (utime+stime of the postmaster and its children,
// plus the children it reaped, and of PgBouncer; of etcd), memory (PSS from
// /proc/<pid>/smaps_rollup) and WAL (pg_current_wal_lsn; etcd's
// etcd_disk_wal_write_bytes_total).  Every figure is a CSV line
// "system,n,phase,metric,value,unit" appended to -out.
//
// -system pgsessions: -n sessions of -ttl holding -leases leases each, in
// min(20, n) processes renewing their sessions in one statement every ttl/3
// through PgBouncer, for -window: renewals a second, each statement's
// latency, CPU, and sessions lost.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgconn"
	"github.com/jackc/pgconn/stmtcache"
	"github.com/jackc/pgx/v4"
	"go.etcd.io/etcd/clientv3"
	"go.etcd.io/etcd/clientv3/concurrency"
	"go.uber.org/zap"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: fleet measure|table|pgcand|etcdcand|pgsess [flags]")
		os.Exit(2)
	}
	mode := os.Args[1]
	rand.Seed(time.Now().UnixNano())
	fs := flag.NewFlagSet(mode, flag.ExitOnError)
	o := opts{}
	fs.StringVar(&o.system, "system", "pg", "pg, etcd or pgsessions")
	fs.IntVar(&o.n, "n", 100, "candidates (sessions for pgsessions)")
	fs.IntVar(&o.procs, "procs", 20, "client processes at most")
	fs.IntVar(&o.count, "count", 0, "candidates of this process")
	fs.IntVar(&o.id, "id", 0, "this process's number")
	fs.DurationVar(&o.ttl, "ttl", 3*time.Second, "session ttl")
	fs.DurationVar(&o.poll, "poll", 500*time.Millisecond, "poll interval of a place")
	fs.DurationVar(&o.window, "window", 60*time.Second, "length of the baseline and fleet phases")
	fs.DurationVar(&o.hold, "hold", 200*time.Millisecond, "how long a new leader leads before it resigns")
	fs.IntVar(&o.handovers, "handovers", 30, "hand-overs per kind")
	fs.IntVar(&o.leases, "leases", 10, "leases per session (pgsessions)")
	fs.StringVar(&o.pool, "pool", "", "connection string through PgBouncer")
	fs.StringVar(&o.direct, "direct", "", "connection string to the server")
	fs.StringVar(&o.etcd, "etcd", "", "etcd client endpoint")
	fs.StringVar(&o.etcdMetrics, "etcd-metrics", "", "etcd metrics URL")
	fs.IntVar(&o.etcdPid, "etcd-pid", 0, "etcd's pid")
	fs.IntVar(&o.bouncerPid, "pgbouncer-pid", 0, "PgBouncer's pid")
	fs.StringVar(&o.lock, "lock", "fleet", "lock (pg) or election prefix (etcd)")
	fs.StringVar(&o.out, "out", "", "CSV file to append to")
	_ = fs.Parse(os.Args[2:])
	var err error
	switch mode {
	case "measure":
		err = measure(o)
	case "pgcand":
		err = pgCandidates(o, false)
	case "pgsess":
		err = pgCandidates(o, true)
	case "etcdcand":
		err = etcdCandidates(o)
	case "table":
		err = table(o)
	default:
		err = fmt.Errorf("unknown mode %q", mode)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "fleet %s: %v\n", mode, err)
		if mode != "measure" {
			fmt.Printf("err %s\n", strings.ReplaceAll(err.Error(), "\n", " "))
		}
		os.Exit(1)
	}
}

type opts struct {
	system, pool, direct, etcd, etcdMetrics, lock, out          string
	n, procs, count, id, handovers, leases, etcdPid, bouncerPid int
	ttl, poll, window, hold                                     time.Duration
}

func (o opts) renewEvery() time.Duration { return o.ttl / 3 }

// connect opens a pgx connection that uses no named prepared statement (the
// statement cache in describe mode, as clients/go does), so that it works
// through a transaction-pooling PgBouncer.
func connect(ctx context.Context, connString, app string) (*pgx.Conn, error) {
	config, err := pgx.ParseConfig(connString)
	if err != nil {
		return nil, err
	}
	config.RuntimeParams["application_name"] = app
	config.BuildStatementCache = func(conn *pgconn.PgConn) stmtcache.Cache {
		return stmtcache.New(conn, stmtcache.ModeDescribe, 64)
	}
	return pgx.ConnectConfig(ctx, config)
}

// etcdClient is a client of the etcd under test that logs errors only (a
// candidate's Campaign cancelled at the end would log a warning each).
func etcdClient(o opts) (*clientv3.Client, error) {
	log := zap.NewProductionConfig()
	log.Level = zap.NewAtomicLevelAt(zap.ErrorLevel)
	return clientv3.New(clientv3.Config{Endpoints: []string{o.etcd}, DialTimeout: 5 * time.Second, LogConfig: &log})
}

func now() int64 { return time.Now().UnixNano() }

// heard: a place named by a notification, and when the listener had it.
type heard struct {
	place int64
	at    int64
}

// ---------------------------------------------------------------- children

// emitter writes event lines to stdout, one at a time.
type emitter struct{ mu sync.Mutex }

func (e *emitter) say(format string, args ...interface{}) {
	e.mu.Lock()
	fmt.Printf(format+"\n", args...)
	e.mu.Unlock()
}

func commands() <-chan string {
	ch := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			ch <- strings.TrimSpace(sc.Text())
		}
		close(ch)
	}()
	return ch
}

// pgCandidates is one process of the pg fleet: -count sessions, each with a
// place in the line of -lock (or, sessionsOnly, with -leases leases), on
// one connection through PgBouncer.  One loop does everything in turn: the
// renewal of all its sessions every ttl/3, the poll of all its places every
// -poll (and the named place at once on a notification, once told to listen), and the
// commands.
func pgCandidates(o opts, sessionsOnly bool) error {
	ctx := context.Background()
	var out emitter
	conn, err := connect(ctx, o.pool, fmt.Sprintf("fleet-%d", o.id))
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	cmds := commands()
	notified := make(chan heard, 64) // the first place, as NOTIFY names it
	var sessions, places []int64
	reported := map[int64]bool{} // places whose grant we told
	heardAt := int64(0)          // when the listener heard of the place polled now, 0 if not heard
	leading := int64(0)          // the place that leads, 0 if none
	placeOf := map[int64]int64{} // place -> session
	ttl := fmt.Sprintf("%d ms", o.ttl.Milliseconds())
	// Each process at a phase of its own, as processes started apart are:
	// started together, they would all poll in the same instant.
	rng := rand.New(rand.NewSource(time.Now().UnixNano() + int64(o.id)))
	nextRenew := time.Now().Add(time.Duration(rng.Int63n(int64(o.renewEvery()))))
	nextPoll := time.Now().Add(time.Duration(rng.Int63n(int64(o.poll))))
	const batch = 100
	lostTotal := 0

	// The sessions of -system pgsessions are opened with a long ttl, which
	// their renewals keep while the leases are taken (100,000 grants take
	// longer than a 3 s session lives on 2 cores), and bring to -ttl once
	// this process has all of its sessions and leases.
	fillTTL := "10 min"
	filled := func() bool { return len(sessions) >= o.count }
	renew := func() error {
		if len(sessions) == 0 {
			return nil
		}
		t0 := time.Now()
		renewTTL := ttl
		if sessionsOnly && !filled() {
			renewTTL = fillTTL
		}
		rows, err := conn.Query(ctx, "SELECT fencing_session_renew(s, $2::interval) FROM unnest($1::bigint[]) s", sessions, renewTTL)
		if err != nil {
			return fmt.Errorf("renew: %w", err)
		}
		renewed, lost := 0, 0
		for rows.Next() {
			var ok bool
			if err := rows.Scan(&ok); err != nil {
				rows.Close()
				return err
			}
			if ok {
				renewed++
			} else {
				lost++
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("renew: %w", err)
		}
		lostTotal += lost
		out.say("renew %d %d %d %d", t0.UnixNano(), time.Since(t0).Microseconds(), renewed, lost)
		return nil
	}
	pollSome := func(these []int64) error {
		if len(these) == 0 {
			return nil
		}
		rows, err := conn.Query(ctx, "SELECT place, state FROM fencing_line_poll($1::bigint[])", these)
		if err != nil {
			return fmt.Errorf("poll: %w", err)
		}
		var granted []int64
		gone := 0
		for rows.Next() {
			var place int64
			var state string
			if err := rows.Scan(&place, &state); err != nil {
				rows.Close()
				return err
			}
			switch state {
			case "granted":
				granted = append(granted, place)
			case "gone":
				gone++
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("poll: %w", err)
		}
		t := now()
		for _, p := range granted {
			if !reported[p] {
				reported[p] = true
				leading = p
				out.say("granted %d %d %d", t, p, heardAt)
			}
		}
		if gone > 0 {
			out.say("gone %d", gone)
		}
		return nil
	}
	poll := func() error { return pollSome(places) }
	setup := func() error { // one batch: open, then join or acquire
		k := batch
		if left := o.count - len(sessions); left < k {
			k = left
		}
		openTTL := ttl
		if sessionsOnly {
			openTTL = fillTTL
		}
		rows, err := conn.Query(ctx, "SELECT fencing_session_open('c' || $1::int || '-' || i, $2::interval) FROM generate_series($3::int, $4::int) i",
			o.id, openTTL, len(sessions)+1, len(sessions)+k)
		if err != nil {
			return fmt.Errorf("open: %w", err)
		}
		var opened []int64
		for rows.Next() {
			var s int64
			if err := rows.Scan(&s); err != nil {
				rows.Close()
				return err
			}
			opened = append(opened, s)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("open: %w", err)
		}
		sessions = append(sessions, opened...)
		if sessionsOnly {
			// 5 sessions a statement (50 grants with -leases 10): each grant
			// holds its lock's waiting room until its transaction ends.
			per := 50 / o.leases
			if per < 1 {
				per = 1
			}
			for i := 0; i < len(opened); i += per {
				j := i + per
				if j > len(opened) {
					j = len(opened)
				}
				if _, err := conn.Exec(ctx, "SELECT count(fencing_session_acquire(s, 'lease-' || s || '-' || g)) FROM unnest($1::bigint[]) s, generate_series(1, $2::int) g",
					opened[i:j], o.leases); err != nil {
					return fmt.Errorf("acquire: %w", err)
				}
				if time.Now().After(nextRenew) {
					if err := renew(); err != nil {
						return err
					}
					nextRenew = nextRenew.Add(o.renewEvery())
				}
			}
			return nil
		}
		rows, err = conn.Query(ctx, "SELECT s, j.place FROM unnest($1::bigint[]) s, LATERAL fencing_line_join(s, $2) j", opened, o.lock)
		if err != nil {
			return fmt.Errorf("join: %w", err)
		}
		for rows.Next() {
			var s, p int64
			if err := rows.Scan(&s, &p); err != nil {
				rows.Close()
				return err
			}
			places = append(places, p)
			placeOf[p] = s
		}
		rows.Close()
		return rows.Err()
	}
	resign := func() error {
		if leading == 0 {
			out.say("resigned 0 0")
			return nil
		}
		p := leading
		var left bool
		if err := conn.QueryRow(ctx, "SELECT fencing_line_leave($1::bigint)", p).Scan(&left); err != nil {
			return fmt.Errorf("leave: %w", err)
		}
		t := now()
		leading = 0
		out.say("resigned %d %d", t, p)
		// Back in line, at the back, with the same session.
		s := placeOf[p]
		delete(placeOf, p)
		for i, q := range places {
			if q == p {
				places = append(places[:i], places[i+1:]...)
				break
			}
		}
		var np int64
		if err := conn.QueryRow(ctx, "SELECT place FROM fencing_line_join($1::bigint, $2)", s, o.lock).Scan(&np); err != nil {
			return fmt.Errorf("join again: %w", err)
		}
		places = append(places, np)
		placeOf[np] = s
		return nil
	}
	listen := func() error {
		lc, err := connect(ctx, o.direct, fmt.Sprintf("fleet-listen-%d", o.id))
		if err != nil {
			return err
		}
		if _, err := lc.Exec(ctx, "LISTEN fencing_line"); err != nil {
			return err
		}
		go func() {
			for {
				n, err := lc.WaitForNotification(ctx)
				if err != nil {
					out.say("err listener: %v", err)
					return
				}
				place, err := strconv.ParseInt(n.Payload, 10, 64)
				if err != nil {
					continue
				}
				select {
				case notified <- heard{place, now()}:
				default:
				}
			}
		}()
		out.say("listening")
		return nil
	}

	readySaid := false
	for {
		if !time.Now().Before(nextRenew) {
			if err := renew(); err != nil {
				return err
			}
			nextRenew = nextRenew.Add(o.renewEvery())
			if time.Until(nextRenew) < 0 { // fell behind: no burst
				nextRenew = time.Now().Add(o.renewEvery())
			}
		}
		if len(sessions) < o.count {
			if err := setup(); err != nil {
				return err
			}
			continue
		}
		if !readySaid {
			readySaid = true
			out.say("ready %d %d", len(sessions), len(places))
		}
		if !sessionsOnly && !time.Now().Before(nextPoll) {
			if err := poll(); err != nil {
				return err
			}
			nextPoll = nextPoll.Add(o.poll)
			if time.Until(nextPoll) < 0 {
				nextPoll = time.Now().Add(o.poll)
			}
		}
		wake := nextRenew
		if !sessionsOnly && nextPoll.Before(wake) {
			wake = nextPoll
		}
		timer := time.NewTimer(time.Until(wake))
		select {
		case <-timer.C:
		case h := <-notified:
			// Only the process whose place is named polls at once, and that
			// place alone, as the clients do (clients/go/line.go,
			// lineBoard.heard wakes the one wait of that place).
			timer.Stop()
			if _, mine := placeOf[h.place]; mine {
				heardAt = h.at
				if err := pollSome([]int64{h.place}); err != nil {
					return err
				}
				heardAt = 0
			}
		case c, ok := <-cmds:
			timer.Stop()
			if !ok || c == "quit" {
				if _, err := conn.Exec(ctx, "SELECT count(fencing_session_close(s)) FROM unnest($1::bigint[]) s", sessions); err != nil {
					return fmt.Errorf("close: %w", err)
				}
				out.say("bye %d", lostTotal)
				return nil
			}
			switch c {
			case "resign":
				if err := resign(); err != nil {
					return err
				}
			case "listen":
				if err := listen(); err != nil {
					return err
				}
			}
		}
	}
}

// etcdCandidates is one process of the etcd fleet: -count sessions of -ttl
// on one client, each campaigning in the election -lock.
func etcdCandidates(o opts) error {
	var out emitter
	cli, err := etcdClient(o)
	if err != nil {
		return err
	}
	defer cli.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ttl := int(o.ttl / time.Second)
	type cand struct {
		s *concurrency.Session
		e *concurrency.Election
	}
	cands := make([]cand, o.count)
	var mu sync.Mutex
	leading := -1
	campaign := func(i int) {
		val := fmt.Sprintf("c%d-%d", o.id, i)
		if err := cands[i].e.Campaign(ctx, val); err != nil {
			if ctx.Err() == nil {
				out.say("err campaign: %v", err)
			}
			return
		}
		t := now()
		mu.Lock()
		leading = i
		mu.Unlock()
		out.say("granted %d %d", t, i)
	}
	sem := make(chan struct{}, 50)
	var wg sync.WaitGroup
	var failed atomic.Value
	for i := range cands {
		wg.Add(1)
		sem <- struct{}{}
		go func(i int) {
			defer wg.Done()
			defer func() { <-sem }()
			s, err := concurrency.NewSession(cli, concurrency.WithTTL(ttl))
			if err != nil {
				failed.Store(err)
				return
			}
			cands[i] = cand{s, concurrency.NewElection(s, o.lock)}
		}(i)
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		return err
	}
	var lost int64
	quitting := make(chan struct{})
	for i := range cands {
		go campaign(i)
		go func(s *concurrency.Session) {
			select {
			case <-s.Done():
				select {
				case <-quitting:
				default:
					atomic.AddInt64(&lost, 1)
					out.say("lost 1")
				}
			case <-quitting:
			}
		}(cands[i].s)
	}
	out.say("ready %d %d", len(cands), len(cands))
	for c := range commands() {
		switch c {
		case "resign":
			mu.Lock()
			i := leading
			leading = -1
			mu.Unlock()
			if i < 0 {
				out.say("resigned 0 0")
				continue
			}
			if err := cands[i].e.Resign(ctx); err != nil {
				return fmt.Errorf("resign: %w", err)
			}
			out.say("resigned %d %d", now(), i)
			go campaign(i)
		case "quit":
			close(quitting)
			cancel()
			var cw sync.WaitGroup
			for i := range cands {
				cw.Add(1)
				sem <- struct{}{}
				go func(s *concurrency.Session) {
					defer cw.Done()
					defer func() { <-sem }()
					_ = s.Close()
				}(cands[i].s)
			}
			cw.Wait()
			out.say("bye %d", atomic.LoadInt64(&lost))
			return nil
		}
	}
	return nil
}

// ---------------------------------------------------------------- measuring

type event struct {
	child int
	kind  string
	args  []string
}

type child struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
}

type fleet struct {
	children  []*child
	events    chan event
	pending   []event // read, not yet asked for
	ready     chan int
	mu        sync.Mutex
	lost      int64
	errs      []string
	renewUs   []float64 // each child's renew statement, microseconds
	renewed   int64     // sessions renewed
	renewLost int64
	record    atomic.Bool // renewals counted only while set
}

func (f *fleet) send(i int, c string) error {
	_, err := io.WriteString(f.children[i].stdin, c+"\n")
	return err
}

func (f *fleet) quit() {
	for i := range f.children {
		_ = f.send(i, "quit")
	}
	done := make(chan struct{})
	go func() {
		for _, c := range f.children {
			_ = c.cmd.Wait()
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		for _, c := range f.children {
			_ = c.cmd.Process.Kill()
		}
	}
}

// startFleet starts the candidate processes: n candidates over at most
// o.procs processes.
func startFleet(o opts, mode string) (*fleet, error) {
	procs := o.procs
	if o.n < procs {
		procs = o.n
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	f := &fleet{events: make(chan event, 4096), ready: make(chan int, procs)}
	for i := 0; i < procs; i++ {
		count := o.n / procs
		if i < o.n%procs {
			count++
		}
		cmd := exec.Command(self, mode, "-id", strconv.Itoa(i), "-count", strconv.Itoa(count),
			"-ttl", o.ttl.String(), "-poll", o.poll.String(), "-lock", o.lock, "-leases", strconv.Itoa(o.leases),
			"-pool", o.pool, "-direct", o.direct, "-etcd", o.etcd)
		cmd.Stderr = os.Stderr
		stdin, err := cmd.StdinPipe()
		if err != nil {
			return nil, err
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return nil, err
		}
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		f.children = append(f.children, &child{cmd, stdin})
		go func(i int, r io.Reader) {
			sc := bufio.NewScanner(r)
			for sc.Scan() {
				fields := strings.Fields(sc.Text())
				if len(fields) == 0 {
					continue
				}
				switch fields[0] {
				case "ready":
					f.ready <- i
				case "renew": // t0 us renewed lost
					us, _ := strconv.ParseFloat(fields[2], 64)
					renewed, _ := strconv.ParseInt(fields[3], 10, 64)
					lost, _ := strconv.ParseInt(fields[4], 10, 64)
					f.mu.Lock()
					f.renewLost += lost
					if f.record.Load() {
						f.renewUs = append(f.renewUs, us)
						f.renewed += renewed
					}
					f.mu.Unlock()
				case "lost", "gone":
					k, _ := strconv.ParseInt(fields[1], 10, 64)
					f.mu.Lock()
					f.lost += k
					f.mu.Unlock()
				case "err":
					f.mu.Lock()
					f.errs = append(f.errs, sc.Text())
					f.mu.Unlock()
					fmt.Fprintf(os.Stderr, "child %d: %s\n", i, sc.Text())
				default:
					f.events <- event{i, fields[0], fields[1:]}
				}
			}
		}(i, stdout)
	}
	deadline := time.After(10 * time.Minute)
	for k := 0; k < procs; k++ {
		select {
		case <-f.ready:
		case <-deadline:
			f.quit()
			return nil, errors.New("the fleet did not get ready in 10 minutes")
		}
	}
	return f, nil
}

// wait returns the first event of one of the kinds, or an error after d.
// Events of other kinds wait for a later call, in their order: a new leader
// may say it leads before the old one says it resigned.
func (f *fleet) wait(d time.Duration, kinds ...string) (event, error) {
	match := func(ev event) bool {
		for _, k := range kinds {
			if ev.kind == k {
				return true
			}
		}
		return false
	}
	for i, ev := range f.pending {
		if match(ev) {
			f.pending = append(f.pending[:i:i], f.pending[i+1:]...)
			return ev, nil
		}
	}
	timeout := time.After(d)
	for {
		select {
		case ev := <-f.events:
			if match(ev) {
				return ev, nil
			}
			f.pending = append(f.pending, ev)
		case <-timeout:
			return event{}, fmt.Errorf("no %v within %v", kinds, d)
		}
	}
}

// leader is the one that holds the lock before the fleet joins, renewing on
// a client connection of its own every ttl/3 and timing each renewal.
type leader interface {
	renew(ctx context.Context) error
	resign(ctx context.Context) (time.Time, error)
	close()
}

type pgLeader struct {
	conn           *pgx.Conn
	session, place int64
}

func newPgLeader(ctx context.Context, o opts) (*pgLeader, error) {
	conn, err := connect(ctx, o.pool, "fleet-leader")
	if err != nil {
		return nil, err
	}
	l := &pgLeader{conn: conn}
	if err := conn.QueryRow(ctx, "SELECT fencing_session_open('leader', $1::interval)",
		fmt.Sprintf("%d ms", o.ttl.Milliseconds())).Scan(&l.session); err != nil {
		return nil, err
	}
	var token *string
	if err := conn.QueryRow(ctx, "SELECT place, token::text FROM fencing_line_join($1::bigint, $2)", l.session, o.lock).
		Scan(&l.place, &token); err != nil {
		return nil, err
	}
	if token == nil {
		return nil, errors.New("the leader did not take the lock at once")
	}
	return l, nil
}

func (l *pgLeader) renew(ctx context.Context) error {
	var ok bool
	if err := l.conn.QueryRow(ctx, "SELECT fencing_session_renew($1::bigint)", l.session).Scan(&ok); err != nil {
		return err
	}
	if !ok {
		return errors.New("the leader's session was lost")
	}
	return nil
}

func (l *pgLeader) resign(ctx context.Context) (time.Time, error) {
	var left bool
	err := l.conn.QueryRow(ctx, "SELECT fencing_line_leave($1::bigint)", l.place).Scan(&left)
	return time.Now(), err
}

func (l *pgLeader) close() {
	ctx := context.Background()
	_, _ = l.conn.Exec(ctx, "SELECT fencing_session_close($1::bigint)", l.session)
	_ = l.conn.Close(ctx)
}

type etcdLeader struct {
	cli *clientv3.Client
	s   *concurrency.Session
	e   *concurrency.Election
}

func newEtcdLeader(ctx context.Context, o opts) (*etcdLeader, error) {
	cli, err := etcdClient(o)
	if err != nil {
		return nil, err
	}
	s, err := concurrency.NewSession(cli, concurrency.WithTTL(int(o.ttl/time.Second)))
	if err != nil {
		return nil, err
	}
	e := concurrency.NewElection(s, o.lock)
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := e.Campaign(cctx, "leader"); err != nil {
		return nil, err
	}
	return &etcdLeader{cli, s, e}, nil
}

func (l *etcdLeader) renew(ctx context.Context) error {
	_, err := l.cli.KeepAliveOnce(ctx, l.s.Lease())
	return err
}

func (l *etcdLeader) resign(ctx context.Context) (time.Time, error) {
	err := l.e.Resign(ctx)
	return time.Now(), err
}

func (l *etcdLeader) close() {
	_ = l.s.Close()
	_ = l.cli.Close()
}

// renewals runs the leader's renewals every ttl/3 for d and returns their
// latencies in ms.
func renewals(ctx context.Context, l leader, every, d time.Duration) ([]float64, error) {
	var lat []float64
	end := time.Now().Add(d)
	next := time.Now()
	for time.Now().Before(end) {
		time.Sleep(time.Until(next))
		t0 := time.Now()
		if err := l.renew(ctx); err != nil {
			return lat, err
		}
		lat = append(lat, float64(time.Since(t0).Microseconds())/1000)
		next = next.Add(every)
	}
	return lat, nil
}

// server reads what the server processes use.
type server struct {
	o      opts
	mon    *pgx.Conn // direct, pg only
	monMu  sync.Mutex
	pids   func() []int
	extra  []int // PgBouncer
	reaper int   // the postmaster, whose cutime+cstime count its reaped children
}

type usage struct {
	cpuTicks int64
	wal      float64
	at       time.Time
}

func statFields(pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(s[i+2:]) // fields from the state (3rd) on
}

// cpu: utime+stime (14th, 15th fields) of each pid, and cutime+cstime (16th,
// 17th) of the reaper, in clock ticks.
func (s *server) cpu() int64 {
	var t int64
	for _, pid := range append(s.pids(), s.extra...) {
		f := statFields(pid)
		if len(f) < 15 {
			continue
		}
		u, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		t += u + st
		if pid == s.reaper {
			cu, _ := strconv.ParseInt(f[13], 10, 64)
			cs, _ := strconv.ParseInt(f[14], 10, 64)
			t += cu + cs
		}
	}
	return t
}

func pss(pid int) float64 { // kB
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "Pss:") {
			v, _ := strconv.ParseFloat(strings.Fields(line)[1], 64)
			return v
		}
	}
	return 0
}

func (s *server) pss() (server, extra float64) {
	for _, pid := range s.pids() {
		server += pss(pid)
	}
	for _, pid := range s.extra {
		extra += pss(pid)
	}
	return
}

// postgresPids: the postmaster and its children.
func postgresPids(postmaster int) func() []int {
	return func() []int {
		pids := []int{postmaster}
		entries, _ := os.ReadDir("/proc")
		for _, e := range entries {
			pid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			f := statFields(pid)
			if len(f) > 1 && f[1] == strconv.Itoa(postmaster) {
				pids = append(pids, pid)
			}
		}
		return pids
	}
}

func (s *server) wal(ctx context.Context) float64 {
	if s.mon != nil {
		s.monMu.Lock()
		defer s.monMu.Unlock()
		var lsn float64
		if err := s.mon.QueryRow(ctx, "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::float8").Scan(&lsn); err == nil {
			return lsn
		}
		return math.NaN()
	}
	return etcdMetric(s.o.etcdMetrics, "etcd_disk_wal_write_bytes_total")
}

func etcdMetric(url, name string) float64 {
	if url == "" {
		return math.NaN()
	}
	resp, err := http.Get(url)
	if err != nil {
		return math.NaN()
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 2 && f[0] == name {
			v, _ := strconv.ParseFloat(f[1], 64)
			return v
		}
	}
	return math.NaN()
}

func (s *server) usage(ctx context.Context) usage {
	return usage{s.cpu(), s.wal(ctx), time.Now()}
}

func (s *server) backends(ctx context.Context) int {
	if s.mon == nil {
		return -1
	}
	s.monMu.Lock()
	defer s.monMu.Unlock()
	var n int
	if err := s.mon.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()").Scan(&n); err != nil {
		return -1
	}
	return n
}

type recorder struct {
	o       opts
	csv     *os.File
	samples *os.File // every latency, "system,n,phase,metric,i,ms"
}

func (r *recorder) put(phase, metric string, value float64, unit string) {
	line := fmt.Sprintf("%s,%d,%s,%s,%s,%s\n", r.o.system, r.o.n, phase, metric, strconv.FormatFloat(value, 'f', -1, 64), unit)
	if r.csv != nil {
		_, _ = r.csv.WriteString(line)
	}
	fmt.Print(line)
}

func percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	// nearest rank
	k := int(math.Ceil(p/100*float64(len(s)))) - 1
	if k < 0 {
		k = 0
	}
	return s[k]
}

func (r *recorder) latencies(phase, metric string, xs []float64) {
	if r.samples != nil {
		for i, x := range xs {
			fmt.Fprintf(r.samples, "%s,%d,%s,%s,%d,%.3f\n", r.o.system, r.o.n, phase, metric, i+1, x)
		}
	}
	r.put(phase, metric+"_p50", percentile(xs, 50), "ms")
	r.put(phase, metric+"_p99", percentile(xs, 99), "ms")
	r.put(phase, metric+"_max", percentile(xs, 100), "ms")
	r.put(phase, metric+"_samples", float64(len(xs)), "count")
}

// window measures one phase of d: the leader's renewals (if l is not nil),
// and the server's backends (the most seen, sampled every second), CPU, WAL
// and memory (at the end).
func window(ctx context.Context, r *recorder, s *server, l leader, phase string, d time.Duration) error {
	stop := make(chan struct{})
	most := 0
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			if b := s.backends(ctx); b > most {
				most = b
			}
			select {
			case <-stop:
				return
			case <-time.After(time.Second):
			}
		}
	}()
	u0 := s.usage(ctx)
	var lat []float64
	var err error
	if l != nil {
		lat, err = renewals(ctx, l, r.o.renewEvery(), d)
	} else {
		time.Sleep(d)
	}
	u1 := s.usage(ctx)
	close(stop)
	wg.Wait()
	if err != nil {
		return fmt.Errorf("%s: the leader's renewal: %w", phase, err)
	}
	minutes := u1.at.Sub(u0.at).Minutes()
	if l != nil {
		r.latencies(phase, "leader_renew", lat)
	}
	if s.mon != nil {
		r.put(phase, "client_backends_max", float64(most), "count")
	}
	r.put(phase, "server_cpu", float64(u1.cpuTicks-u0.cpuTicks)/100/minutes, "s/min")
	r.put(phase, "wal", (u1.wal-u0.wal)/minutes, "bytes/min")
	srv, extra := s.pss()
	r.put(phase, "server_pss", (srv+extra)/1024, "MiB")
	if s.extra != nil {
		r.put(phase, "pgbouncer_pss", extra/1024, "MiB")
	}
	return nil
}

// handovers: the leader resigns, then each new leader resigns -hold after it
// knew, o.handovers times; returns the hand-over times in ms, and, for the
// hand-overs whose new leader polled on a notification, the time from the
// resign to its listener having the notification (where the rest of the
// hand-over goes: the poll, its grant and commit).
func handovers(f *fleet, o opts, firstResign func() (time.Time, error), holder int) (ms, heardMs []float64, _ int, _ error) {
	resignedAt, err := firstResign()
	if err != nil {
		return nil, nil, holder, err
	}
	for i := 0; i < o.handovers; i++ {
		ev, err := f.wait(30*time.Second, "granted")
		if err != nil {
			return ms, heardMs, holder, fmt.Errorf("hand-over %d: %w", i+1, err)
		}
		t, _ := strconv.ParseInt(ev.args[0], 10, 64)
		ms = append(ms, float64(t-resignedAt.UnixNano())/1e6)
		if len(ev.args) > 2 {
			if h, _ := strconv.ParseInt(ev.args[2], 10, 64); h > 0 {
				heardMs = append(heardMs, float64(h-resignedAt.UnixNano())/1e6)
			}
		}
		holder = ev.child
		if i == o.handovers-1 {
			break
		}
		// A hold of o.hold plus up to one poll interval, at random, so that
		// the resign falls anywhere between the pollers' ticks.
		time.Sleep(o.hold + time.Duration(rand.Int63n(int64(o.poll))))
		if err := f.send(holder, "resign"); err != nil {
			return ms, heardMs, holder, err
		}
		ev, err = f.wait(30*time.Second, "resigned")
		if err != nil {
			return ms, heardMs, holder, err
		}
		t, _ = strconv.ParseInt(ev.args[0], 10, 64)
		if t == 0 {
			return ms, heardMs, holder, fmt.Errorf("process %d was told to resign but leads nothing", holder)
		}
		resignedAt = time.Unix(0, t)
	}
	return ms, heardMs, holder, nil
}

func measure(o opts) error {
	ctx := context.Background()
	r := &recorder{o: o}
	if o.out != "" {
		f, err := os.OpenFile(o.out, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			return err
		}
		defer f.Close()
		r.csv = f
		sf, err := os.OpenFile(strings.TrimSuffix(o.out, ".csv")+"_samples.csv", os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			return err
		}
		defer sf.Close()
		r.samples = sf
	}
	s := &server{o: o}
	if o.system == "etcd" {
		s.pids = func() []int { return []int{o.etcdPid} }
	} else {
		mon, err := connect(ctx, o.direct, "fleet-monitor")
		if err != nil {
			return err
		}
		defer mon.Close(ctx)
		s.mon = mon
		var dir string
		if err := mon.QueryRow(ctx, "SELECT setting FROM pg_settings WHERE name = 'data_directory'").Scan(&dir); err != nil {
			return err
		}
		b, err := os.ReadFile(filepath.Join(dir, "postmaster.pid"))
		if err != nil {
			return err
		}
		pm, err := strconv.Atoi(strings.SplitN(string(b), "\n", 2)[0])
		if err != nil {
			return err
		}
		s.pids, s.reaper, s.extra = postgresPids(pm), pm, []int{o.bouncerPid}
		if _, err := mon.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_fencing"); err != nil {
			return err
		}
	}
	if o.system == "pgsessions" {
		return measureSessions(ctx, o, r, s)
	}

	var l leader
	var err error
	if o.system == "etcd" {
		l, err = newEtcdLeader(ctx, o)
	} else {
		l, err = newPgLeader(ctx, o)
	}
	if err != nil {
		return fmt.Errorf("the leader: %w", err)
	}
	defer l.close()
	fmt.Fprintf(os.Stderr, "fleet: %s n=%d: baseline, %v\n", o.system, o.n, o.window)
	if err := window(ctx, r, s, l, "baseline", o.window); err != nil {
		return err
	}
	mode := "pgcand"
	if o.system == "etcd" {
		mode = "etcdcand"
	}
	// The leader keeps renewing while the fleet joins.
	joinStop := make(chan struct{})
	joinDone := make(chan error, 1)
	go func() {
		for {
			select {
			case <-joinStop:
				joinDone <- nil
				return
			case <-time.After(o.renewEvery()):
				if err := l.renew(ctx); err != nil {
					joinDone <- err
					return
				}
			}
		}
	}()
	t0 := time.Now()
	f, err := startFleet(o, mode)
	close(joinStop)
	if jerr := <-joinDone; jerr != nil && err == nil {
		err = fmt.Errorf("the leader's renewal while the fleet joined: %w", jerr)
	}
	if err != nil {
		// A system that cannot take the whole fleet starting at once is a
		// result, not the end of the run (etcd 3.4 at 10,000 on two cores:
		// "too many requests", and its leader's keepalive timed out).
		fmt.Fprintf(os.Stderr, "fleet: %s n=%d: the fleet's start failed: %v\n", o.system, o.n, err)
		r.put("join", "start_failed", 1, "count")
		if f != nil {
			f.mu.Lock()
			r.put("all", "child_errors", float64(len(f.errs)), "count")
			f.mu.Unlock()
			f.quit()
		}
		return nil
	}
	defer f.quit()
	r.put("join", "start_failed", 0, "count")
	r.put("join", "fleet_ready", time.Since(t0).Seconds(), "s")
	if err := waitAllWaiting(ctx, o, s); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "fleet: %s n=%d: %d waiting, %v\n", o.system, o.n, o.n, o.window)
	if err := window(ctx, r, s, l, "fleet", o.window); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "fleet: %s n=%d: %d hand-overs\n", o.system, o.n, o.handovers)
	kind := "handover"
	if o.system != "etcd" {
		kind = "handover_pool"
	}
	ms, _, holder, err := handovers(f, o, func() (time.Time, error) { return l.resign(ctx) }, -1)
	if err != nil {
		return err
	}
	r.latencies(kind, "handover", ms)
	if o.system != "etcd" {
		for i := range f.children {
			if err := f.send(i, "listen"); err != nil {
				return err
			}
		}
		for range f.children {
			if _, err := f.wait(30*time.Second, "listening"); err != nil {
				return err
			}
		}
		time.Sleep(time.Second)
		fmt.Fprintf(os.Stderr, "fleet: %s n=%d: %d hand-overs, listening\n", o.system, o.n, o.handovers)
		ms, heardMs, _, err := handovers(f, o, func() (time.Time, error) {
			if err := f.send(holder, "resign"); err != nil {
				return time.Time{}, err
			}
			ev, err := f.wait(30*time.Second, "resigned")
			if err != nil {
				return time.Time{}, err
			}
			t, _ := strconv.ParseInt(ev.args[0], 10, 64)
			return time.Unix(0, t), nil
		}, holder)
		if err != nil {
			return err
		}
		r.latencies("handover_listen", "handover", ms)
		r.latencies("handover_listen", "heard", heardMs)
		r.put("handover_listen", "client_backends", float64(s.backends(ctx)), "count")
	}
	f.mu.Lock()
	lost, errs := f.lost+f.renewLost, len(f.errs)
	f.mu.Unlock()
	r.put("all", "candidates_lost", float64(lost), "count")
	r.put("all", "child_errors", float64(errs), "count")
	return nil
}

// waitAllWaiting waits until the server has all n candidates waiting.
func waitAllWaiting(ctx context.Context, o opts, s *server) error {
	var cli *clientv3.Client
	if o.system == "etcd" {
		var err error
		cli, err = etcdClient(o)
		if err != nil {
			return err
		}
		defer cli.Close()
	}
	deadline := time.Now().Add(5 * time.Minute)
	for {
		var n int64
		if cli != nil {
			resp, err := cli.Get(ctx, o.lock+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
			if err != nil {
				return err
			}
			n = resp.Count - 1 // the leader's key
		} else if err := s.mon.QueryRow(ctx, "SELECT count(*) FROM fencing_lines WHERE lock_name = $1 AND live", o.lock).Scan(&n); err != nil {
			return err
		}
		if n >= int64(o.n) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("only %d of %d candidates waiting", n, o.n)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// measureSessions: o.n sessions holding o.leases leases each, renewed by
// their processes every ttl/3, for o.window.
func measureSessions(ctx context.Context, o opts, r *recorder, s *server) error {
	t0 := time.Now()
	f, err := startFleet(o, "pgsess")
	if err != nil {
		return err
	}
	defer f.quit()
	r.put("setup", "sessions_ready", time.Since(t0).Seconds(), "s")
	var leases int64
	if err := s.mon.QueryRow(ctx, "SELECT count(*) FROM fencing_leases WHERE lock_name LIKE 'lease-%' AND state = 'live'").Scan(&leases); err != nil {
		return err
	}
	r.put("setup", "live_leases", float64(leases), "count")
	f.mu.Lock()
	lostBefore := f.lost + f.renewLost
	f.mu.Unlock()
	fmt.Fprintf(os.Stderr, "fleet: %d sessions with %d leases live, %v\n", o.n, leases, o.window)
	f.record.Store(true)
	if err := window(ctx, r, s, nil, "renewing", o.window); err != nil {
		return err
	}
	f.record.Store(false)
	f.mu.Lock()
	renewed, us, lost := f.renewed, f.renewUs, f.lost+f.renewLost
	f.mu.Unlock()
	r.put("renewing", "sessions_renewed", float64(renewed)/o.window.Seconds(), "per s")
	ms := make([]float64, len(us))
	for i, u := range us {
		ms[i] = u / 1000
	}
	r.latencies("renewing", "renew_statement", ms)
	if err := s.mon.QueryRow(ctx, "SELECT count(*) FROM fencing_leases WHERE lock_name LIKE 'lease-%' AND state = 'live'").Scan(&leases); err != nil {
		return err
	}
	r.put("renewing", "live_leases_after", float64(leases), "count")
	r.put("setup", "sessions_lost", float64(lostBefore), "count")
	r.put("renewing", "sessions_lost", float64(lost-lostBefore), "count")
	return nil
}

// ---------------------------------------------------------------- the table

// table prints the CSV lines of -out as one table per count: each figure of
// pg_fencing and of etcd side by side, and the ratios that matter.
func table(o opts) error {
	b, err := os.ReadFile(o.out)
	if err != nil {
		return err
	}
	type key struct{ system, n, phase, metric string }
	v := map[key]float64{}
	var counts []string
	seen := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Split(line, ",")
		if len(f) != 6 || f[0] == "system" {
			continue
		}
		x, err := strconv.ParseFloat(f[4], 64)
		if err != nil {
			continue
		}
		v[key{f[0], f[1], f[2], f[3]}] = x
		if (f[0] == "pg" || f[0] == "etcd") && !seen[f[1]] {
			seen[f[1]] = true
			counts = append(counts, f[1])
		}
	}
	get := func(sys, n, phase, metric string) float64 {
		x, ok := v[key{sys, n, phase, metric}]
		if !ok {
			return math.NaN()
		}
		return x
	}
	cell := func(x float64, prec int) string {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return "-"
		}
		return strconv.FormatFloat(x, 'f', prec, 64)
	}
	for _, n := range counts {
		fmt.Printf("\n%s candidates waiting (ttl %v, leader renews every ttl/3)\n", n, o.ttl)
		fmt.Printf("%-52s %16s %16s\n", "", "pg_fencing", "etcd")
		row := func(label string, prec int, f func(sys string) float64) {
			fmt.Printf("%-52s %16s %16s\n", label, cell(f("pg"), prec), cell(f("etcd"), prec))
		}
		for _, p := range []string{"p50", "p99"} {
			p := p
			row("leader renewal "+p+", no fleet (ms)", 2, func(s string) float64 { return get(s, n, "baseline", "leader_renew_"+p) })
			row("leader renewal "+p+", fleet waiting (ms)", 2, func(s string) float64 { return get(s, n, "fleet", "leader_renew_"+p) })
			row("  ratio fleet / no fleet", 2, func(s string) float64 {
				return get(s, n, "fleet", "leader_renew_"+p) / get(s, n, "baseline", "leader_renew_"+p)
			})
		}
		row("leader renewals timed, each phase", 0, func(s string) float64 { return get(s, n, "fleet", "leader_renew_samples") })
		for _, p := range []string{"p50", "p99"} {
			p := p
			row("hand-over "+p+", pool only / etcd watch (ms)", 1, func(s string) float64 {
				if s == "pg" {
					return get(s, n, "handover_pool", "handover_"+p)
				}
				return get(s, n, "handover", "handover_"+p)
			})
			row("hand-over "+p+", LISTEN per process (ms)", 1, func(s string) float64 { return get(s, n, "handover_listen", "handover_"+p) })
			// Negative: the notification, sent at the leave's commit, is
			// heard before the leave's answer reaches its caller.
			row("  of which until the notification is heard, "+p+" (ms)", 1, func(s string) float64 { return get(s, n, "handover_listen", "heard_"+p) })
		}
		row("hand-overs, each kind", 0, func(s string) float64 {
			if s == "pg" {
				return get(s, n, "handover_pool", "handover_samples")
			}
			return get(s, n, "handover", "handover_samples")
		})
		row("server client backends, no fleet (most)", 0, func(s string) float64 { return get(s, n, "baseline", "client_backends_max") })
		row("server client backends, fleet waiting (most)", 0, func(s string) float64 { return get(s, n, "fleet", "client_backends_max") })
		row("server client backends, LISTEN per process", 0, func(s string) float64 { return get(s, n, "handover_listen", "client_backends") })
		row("server PSS, no fleet (MiB)", 1, func(s string) float64 { return get(s, n, "baseline", "server_pss") })
		row("server PSS, fleet waiting (MiB)", 1, func(s string) float64 { return get(s, n, "fleet", "server_pss") })
		row("  of which PgBouncer (MiB)", 1, func(s string) float64 { return get(s, n, "fleet", "pgbouncer_pss") })
		row("server CPU, no fleet (s/min)", 2, func(s string) float64 { return get(s, n, "baseline", "server_cpu") })
		row("server CPU, fleet waiting (s/min)", 2, func(s string) float64 { return get(s, n, "fleet", "server_cpu") })
		row("WAL, no fleet (bytes/min)", 0, func(s string) float64 { return get(s, n, "baseline", "wal") })
		row("WAL, fleet waiting (bytes/min)", 0, func(s string) float64 { return get(s, n, "fleet", "wal") })
		nn, _ := strconv.ParseFloat(n, 64)
		row("WAL per waiting candidate (bytes/min)", 0, func(s string) float64 {
			return (get(s, n, "fleet", "wal") - get(s, n, "baseline", "wal")) / nn
		})
		row("fleet ready after (s)", 1, func(s string) float64 { return get(s, n, "join", "fleet_ready") })
		row("candidates lost", 0, func(s string) float64 { return get(s, n, "all", "candidates_lost") })
		row("errors the candidates' processes reported", 0, func(s string) float64 { return get(s, n, "all", "child_errors") })
		row("the fleet's start failed (1: no later phase)", 0, func(s string) float64 { return get(s, n, "join", "start_failed") })
	}
	for k := range v {
		if k.system != "pgsessions" {
			continue
		}
		n := k.n
		g := func(phase, m string) string {
			x := get("pgsessions", n, phase, m)
			if x == math.Trunc(x) {
				return cell(x, 0)
			}
			return cell(x, 2)
		}
		fmt.Printf("\n%s sessions holding leases, renewed in one statement per process every ttl/3 through PgBouncer\n", n)
		fmt.Printf("  live leases %s; set up in %s s; sessions renewed %s /s; renew statement p50 %s ms, p99 %s ms (%s statements)\n",
			g("setup", "live_leases"), g("setup", "sessions_ready"), g("renewing", "sessions_renewed"),
			g("renewing", "renew_statement_p50"), g("renewing", "renew_statement_p99"), g("renewing", "renew_statement_samples"))
		fmt.Printf("  server CPU %s s/min, WAL %s bytes/min, server PSS %s MiB, client backends %s; sessions lost: setting up %s, renewing %s; live leases after %s\n",
			g("renewing", "server_cpu"), g("renewing", "wal"), g("renewing", "server_pss"), g("renewing", "client_backends_max"),
			g("setup", "sessions_lost"), g("renewing", "sessions_lost"), g("renewing", "live_leases_after"))
		break
	}
	return nil
}
