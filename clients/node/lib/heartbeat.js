// The keepalive of a lease or a session, and the judgement of whether it is
// still held.
//
// Held is judged on the monotonic clock (performance.now()),
// conservatively: it is lost once the send time of the last successful
// acquire, open or renewal, plus ttl, minus a safety margin, has passed --
// whether or not any timer ran meanwhile (the event loop may have been
// blocked, or the process stopped).  The server starts the ttl when it runs
// the request, after the client sent it, so this deadline is never later
// than the server's end (clock rates aside).
//
// A renewal is sent every period (ttl/3); its answer is waited for only
// until that deadline: a timer set for it reports the loss even while a
// renewal is stuck behind a lock or a dead network.  onLost(reason) is
// called once, when a renewal is refused or fails or the deadline passes;
// never after stop().

import { performance } from 'node:perf_hooks';

// How long before the computed end the client stops trusting a lease (ms).
export function safetyMarginMs(ttlMs) {
  return Math.min(Math.max(ttlMs / 10, 50), ttlMs / 2);
}

export class Heartbeat {
  // what      'lease' or 'session', in the reasons
  // renew()   sends one renewal; resolves to whether the server took it
  // refused   why a refused renewal means the loss, in the reason
  constructor({ what, ttlMs, periodMs, renew, refused, onLost }) {
    this.what = what;
    this.ttlMs = ttlMs;
    this.marginMs = safetyMarginMs(ttlMs);
    this.periodMs = periodMs ?? ttlMs / 3;
    if (!(this.periodMs > 0 && this.periodMs < ttlMs - this.marginMs)) {
      throw new RangeError(
        `heartbeat must be positive and shorter than ttl minus the safety margin ` +
          `(${(ttlMs - this.marginMs) / 1000} s), got ${this.periodMs / 1000} s`,
      );
    }
    this.#renew = renew;
    this.#refused = refused;
    this.#onLost = onLost;
  }

  #renew;
  #refused;
  #onLost;
  #validFrom = 0; // performance.now() when the last successful acquire/open/renew was sent
  #lostReason = null;
  #stopped = false;
  #interval = null;
  #deadlineTimer = null;
  #renewing = false;

  // The send time of the request that took the lease or opened the session.
  begin(sent) {
    this.#validFrom = sent;
  }

  renewed(sent) {
    this.#validFrom = Math.max(this.#validFrom, sent);
  }

  start() {
    this.#interval = setInterval(() => this.#beat(), this.periodMs);
    this.#armDeadline();
  }

  // No renewal and no onLost from now on; false if stopped already.
  stop() {
    if (this.#stopped) return false;
    this.#stopped = true;
    this.#clearTimers();
    return true;
  }

  get stopped() {
    return this.#stopped;
  }

  // A renewal is on its way.
  get renewing() {
    return this.#renewing;
  }

  // performance.now() after which it no longer counts as held.
  get deadline() {
    return this.#validFrom + this.ttlMs - this.marginMs;
  }

  // Why it is lost, or null while it is held.
  get lostReason() {
    if (this.#lostReason !== null) return this.#lostReason;
    if (performance.now() >= this.deadline) {
      // No timer has run since the deadline passed (the event loop was
      // blocked, say); the deadline timer reports the same when it runs.
      return 'not renewed within ttl minus the safety margin';
    }
    return null;
  }

  markLost(reason) {
    if (this.#stopped || this.#lostReason !== null) return;
    this.#lostReason = reason;
    this.#clearTimers();
    this.#onLost(reason);
  }

  async #beat() {
    if (this.#renewing || this.#stopped || this.#lostReason !== null) return;
    if (performance.now() >= this.deadline) {
      this.markLost(`not renewed before the ${this.what}'s safe deadline; was the process paused?`);
      return;
    }
    this.#renewing = true;
    const sent = performance.now();
    try {
      const renewed = await this.#renew();
      if (this.#stopped || this.#lostReason !== null) return; // too late to count
      if (!renewed) {
        this.markLost(`renewal refused: ${this.#refused}`);
        return;
      }
      this.renewed(sent);
      this.#armDeadline();
    } catch (err) {
      this.markLost(`renewal failed: ${err.message}`);
    } finally {
      this.#renewing = false;
    }
  }

  // Fires at the deadline, so that a renewal stuck on the wire cannot delay
  // the loss; every successful renewal moves it.
  #armDeadline() {
    clearTimeout(this.#deadlineTimer);
    this.#deadlineTimer = setTimeout(() => {
      if (this.#stopped || this.#lostReason !== null) return;
      if (performance.now() >= this.deadline) {
        this.markLost(
          this.#renewing
            ? `renewal got no answer before the ${this.what}'s safe deadline`
            : `not renewed before the ${this.what}'s safe deadline; was the process paused?`,
        );
      } else {
        this.#armDeadline();
      }
    }, Math.max(0, this.deadline - performance.now()) + 1);
  }

  #clearTimers() {
    clearInterval(this.#interval);
    clearTimeout(this.#deadlineTimer);
    this.#interval = this.#deadlineTimer = null;
  }
}
