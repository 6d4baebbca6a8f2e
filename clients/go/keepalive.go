package fencing

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// keepalive renews a lease or a session and judges whether it is still held.
//
// Held is judged on the monotonic clock (time.Now carries its reading),
// conservatively: it is lost once the send time of the last successful
// acquire, open or renewal, plus ttl, minus a safety margin, has passed --
// whether or not the renewing goroutine ran meanwhile (the process may have
// been stopped, SIGSTOP or a long pause). The server starts the ttl when it
// runs the request, after the client sent it, so this deadline is never
// later than the server's end (clock rates aside).
//
// One goroutine renews every period on a connection of its own, each renewal
// bounded by a context whose deadline is that safe deadline: a renewal stuck
// behind a lock or a dead network cannot delay the report of the loss. pgx
// closes a connection whose context ended mid-statement (after asking the
// server to cancel it), so drop is called and the connection never reused.
// onLost is called once, from that goroutine, never after stop; it may call
// stop (through Release or Close).
type keepalive struct {
	what    string // "lease" or "session", for messages
	ttl     time.Duration
	margin  time.Duration
	period  time.Duration
	refused string // why a renewal answered false
	onLost  func(reason string)
	renew   func(ctx context.Context) (bool, error)
	drop    func()

	mu         sync.Mutex
	validFrom  time.Time
	stopped    bool
	lostReason string

	done     chan struct{} // closed once lost (after onLost) or stopped
	doneOnce sync.Once
	cancel   context.CancelFunc // ends the goroutine and a renewal in flight
	finished chan struct{}
}

// safetyMargin is how long before the computed end the client stops
// trusting a lease: ttl/10, at least 50 ms, at most ttl/2.
func safetyMargin(ttl time.Duration) time.Duration {
	margin := ttl / 10
	if margin < 50*time.Millisecond {
		margin = 50 * time.Millisecond
	}
	if margin > ttl/2 {
		margin = ttl / 2
	}
	return margin
}

func newKeepalive(what string, ttl, period time.Duration, refused string, onLost func(string)) (*keepalive, error) {
	if ttl <= 0 {
		return nil, fmt.Errorf("pg_fencing: ttl must be positive, got %v", ttl)
	}
	margin := safetyMargin(ttl)
	if period == 0 {
		period = ttl / 3
	}
	if period <= 0 || period >= ttl-margin {
		return nil, fmt.Errorf("pg_fencing: heartbeat must be positive and shorter than ttl minus the safety margin (%v), got %v",
			ttl-margin, period)
	}
	return &keepalive{what: what, ttl: ttl, margin: margin, period: period, refused: refused,
		onLost: onLost, done: make(chan struct{}), finished: make(chan struct{})}, nil
}

// begin records the send time of the grant and starts renewing.
func (k *keepalive) begin(sent time.Time, renew func(context.Context) (bool, error), drop func()) {
	k.mu.Lock()
	k.validFrom = sent
	k.mu.Unlock()
	k.renew, k.drop = renew, drop
	ctx, cancel := context.WithCancel(context.Background())
	k.cancel = cancel
	go k.run(ctx)
}

func (k *keepalive) renewed(sent time.Time) {
	k.mu.Lock()
	if sent.After(k.validFrom) {
		k.validFrom = sent
	}
	k.mu.Unlock()
}

func (k *keepalive) deadline() time.Time {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.validFrom.Add(k.ttl - k.margin)
}

// reason is "" while held, else why not.
func (k *keepalive) reason() string {
	now := time.Now()
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.lostReason != "" {
		return k.lostReason
	}
	if !now.Before(k.validFrom.Add(k.ttl - k.margin)) {
		// The goroutine has not run since the deadline passed (the process
		// was paused, say); it reports the same when it does.
		return "not renewed within ttl minus the safety margin"
	}
	return ""
}

func (k *keepalive) markLost(reason string) {
	k.mu.Lock()
	if k.stopped || k.lostReason != "" {
		k.mu.Unlock()
		return
	}
	k.lostReason = reason
	k.mu.Unlock()
	defer k.closeDone()
	if k.onLost != nil {
		k.onLost(reason)
	}
}

func (k *keepalive) closeDone() { k.doneOnce.Do(func() { close(k.done) }) }

// stop ends the renewals; no onLost from then on (one already under way may
// be the caller). False if stopped already.
func (k *keepalive) stop() bool {
	k.mu.Lock()
	if k.stopped {
		k.mu.Unlock()
		return false
	}
	k.stopped = true
	lost := k.lostReason != ""
	k.mu.Unlock()
	if k.cancel != nil {
		k.cancel()
		// Once the loss is recorded the goroutine only reports it and ends,
		// touching no connection. It may be OnLost itself that called stop
		// (Release or Close is the natural cleanup): waiting for the
		// goroutine there would never end. If the loss was not recorded
		// before stopped was set, markLost sees stopped and calls nothing.
		if !lost {
			<-k.finished
		}
	}
	k.closeDone()
	return true
}

func (k *keepalive) run(ctx context.Context) {
	defer close(k.finished)
	for {
		deadline := k.deadline()
		now := time.Now()
		if !now.Before(deadline) {
			k.markLost(fmt.Sprintf("not renewed before the %s's safe deadline; was the process paused?", k.what))
			return
		}
		k.mu.Lock()
		due := k.validFrom.Add(k.period)
		k.mu.Unlock()
		if now.Before(due) {
			timer := time.NewTimer(due.Sub(now))
			select {
			case <-ctx.Done():
				timer.Stop()
				return
			case <-timer.C:
			}
			continue
		}
		sent := time.Now()
		renewCtx, cancel := context.WithDeadline(ctx, deadline)
		ok, err := k.renew(renewCtx)
		timedOut := renewCtx.Err() != nil
		cancel()
		if ctx.Err() != nil {
			return // stopped; a renewal cut short by stop is no loss
		}
		if err != nil {
			k.drop()
			if timedOut {
				k.markLost(fmt.Sprintf("renewal got no answer before the %s's safe deadline", k.what))
			} else {
				k.markLost(fmt.Sprintf("renewal failed: %v", err))
			}
			return
		}
		if !ok {
			k.markLost("renewal refused: " + k.refused)
			return
		}
		k.renewed(sent)
	}
}
