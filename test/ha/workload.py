#!/usr/bin/python3
"""Workload and checks for test/ha/run.sh (Patroni failover test).

Debian's python3 with python3-psycopg2 (what Patroni itself runs on).

  workload.py leader  API_PORT...            prints "NAME HOST PORT" of the running leader
  workload.py sync    API_PORT...            prints the name of the running sync standby
  workload.py run     LOG STOPFILE WRITERS API_PORT...
  workload.py check   LOG EVENTS API_PORT... checks the log against the final leader

Every writer loops against the *current* leader, found through the Patroni
REST API (GET /cluster on any node that answers), and finds it again after
any connection failure.  One iteration is one transaction:

  SELECT fencing_grant()                      -- logged as "grant" when returned
  UPDATE ha_resource SET token = T ... id = 1 -- the guard rejects T if a higher token wrote first
  INSERT INTO ha_history (token, ...)          -- seq: commit order (see below)
  COMMIT                                       -- logged as "ack" when acknowledged,
                                               -- "unknown" when the connection broke during it

All writers update the one protected row, so they serialise on its row lock
until commit; the history row's seq (a bigserial) is therefore drawn in
commit order.  Every fifth acknowledged write, and after the first write on a
new leader, a writer also tries a write with an older token of its own (one
below its latest acknowledged token, so below the row's): the guard must
refuse it; if it is accepted, that is logged and the check fails.

Every line of the log is JSON, flushed at once; times are time.time().
"""

import json
import os
import sys
import threading
import time
import urllib.request

PASSWORD = os.environ.get("HA_PASSWORD", "")
STALE = "55Z01"    # stale fencing token (psycopg2 has no class for it)


def cluster(api_ports):
    for port in api_ports:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/cluster", timeout=1) as r:
                return json.load(r)
        except Exception:
            continue
    return None


def leader(api_ports):
    c = cluster(api_ports)
    if not c:
        return None
    for m in c.get("members", []):
        if m.get("role") in ("leader", "master") and m.get("state") == "running":
            return m["name"], m["host"], int(m["port"])
    return None


def sync_standby(api_ports):
    c = cluster(api_ports)
    if not c:
        return None
    for m in c.get("members", []):
        if m.get("role") == "sync_standby" and m.get("state") in ("running", "streaming"):
            return m["name"]
    return None


def connect(host, port, name):
    import psycopg2
    return psycopg2.connect(host=host, port=port, user="postgres", password=PASSWORD,
                            dbname="postgres", connect_timeout=2, application_name=name,
                            keepalives=1, keepalives_idle=2, keepalives_interval=1,
                            keepalives_count=2)


class Log:
    def __init__(self, path):
        self.f = open(path, "a", buffering=1)
        self.lock = threading.Lock()

    def write(self, **kw):
        kw.setdefault("t", time.time())
        with self.lock:
            self.f.write(json.dumps(kw) + "\n")
            self.f.flush()


def writer(wid, log, stopfile, api_ports):
    import psycopg2
    conn = None
    node = None
    acked = []             # this writer's acknowledged tokens, in order
    probe_pending = None   # token acknowledged on the previous leader
    n = 0
    while not os.path.exists(stopfile):
        if conn is None:
            found = leader(api_ports)
            if not found:
                time.sleep(0.05)
                continue
            name, host, port = found
            try:
                conn = connect(host, port, f"ha-writer-{wid}")
            except psycopg2.Error:
                conn = None
                time.sleep(0.05)
                continue
            if node is not None and name != node and acked:
                probe_pending = acked[-1]
            node = name
            log.write(ev="connect", w=wid, node=node)
        n += 1
        token = None
        committing = False
        try:
            cur = conn.cursor()
            start = time.time()
            cur.execute("SELECT fencing_grant()")
            token = int(cur.fetchone()[0])
            log.write(ev="grant", w=wid, token=token, start=start, node=node)
            cur.execute("UPDATE ha_resource SET token = %s, val = %s WHERE id = 1",
                        (token, f"w{wid} #{n}"))
            cur.execute("INSERT INTO ha_history (token, writer, node) VALUES (%s, %s, %s) "
                        "RETURNING seq", (token, wid, node))
            seq = cur.fetchone()[0]
            committing = True
            conn.commit()
            committing = False
            log.write(ev="ack", w=wid, token=token, seq=seq, node=node)
            acked.append(token)
            # A stale write: a token below this writer's latest acknowledged
            # one, hence below the row's.  The guard must refuse it.
            stale = None
            if probe_pending is not None:
                stale, probe_pending = probe_pending, None
            elif len(acked) % 5 == 0 and len(acked) >= 4:
                stale = acked[-4]
            if stale is not None:
                try:
                    cur.execute("UPDATE ha_resource SET token = %s, val = 'stale' WHERE id = 1",
                                (stale,))
                    log.write(ev="stale_accepted", w=wid, token=stale, node=node)
                except psycopg2.Error as e:
                    if e.pgcode != STALE:
                        raise
                    log.write(ev="stale_rejected", w=wid, token=stale, node=node)
                conn.rollback()
        except psycopg2.Error as e:
            if e.pgcode == STALE:
                # A higher token wrote the row first: the fence at work.
                log.write(ev="rejected", w=wid, token=token, node=node)
                try:
                    conn.rollback()
                    continue
                except psycopg2.Error:
                    pass
            elif committing:
                log.write(ev="unknown", w=wid, token=token, node=node, err=str(e).strip()[:200])
            elif isinstance(e, (psycopg2.OperationalError, psycopg2.InterfaceError)) or \
                    e.pgcode in ("25006", "57P01", "57P02", "57P03"):
                # Connection lost, read-only (a demoted node), shutting down.
                log.write(ev="conn_lost", w=wid, token=token, node=node, err=str(e).strip()[:200])
            else:
                log.write(ev="error", w=wid, token=token, node=node, err=str(e).strip()[:200])
            try:
                conn.close()
            except Exception:
                pass
            conn = None
    if conn is not None:
        conn.close()


def run(logpath, stopfile, writers, api_ports):
    log = Log(logpath)
    failed = []

    def guarded(i):
        try:
            writer(i, log, stopfile, api_ports)
        except BaseException as e:
            log.write(ev="crash", w=i, err=repr(e))
            failed.append(i)
            raise

    threads = [threading.Thread(target=guarded, args=(i,)) for i in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return 1 if failed else 0


def check(logpath, eventspath, api_ports):
    import psycopg2
    recs = [json.loads(l) for l in open(logpath)]
    events = [json.loads(l) for l in open(eventspath)] if os.path.exists(eventspath) else []
    violations = []
    grants = [r for r in recs if r["ev"] == "grant"]
    acks = [r for r in recs if r["ev"] == "ack"]
    unknown = [r for r in recs if r["ev"] == "unknown"]
    rejected = [r for r in recs if r["ev"] == "rejected"]
    stale_ok = [r for r in recs if r["ev"] == "stale_rejected"]
    stale_bad = [r for r in recs if r["ev"] == "stale_accepted"]
    errors = [r for r in recs if r["ev"] == "error"]

    # 1. No token handed out twice.
    seen = {}
    for g in grants:
        if g["token"] in seen:
            violations.append(f"token {g['token']} handed out twice "
                              f"(on {seen[g['token']]['node']} and on {g['node']})")
        seen.setdefault(g["token"], g)
    # 1b. Grants are ordered in real time: a grant requested after another
    # was returned is higher (across writers and failovers).
    by_return = sorted(grants, key=lambda g: g["t"])
    returned_max = []   # running max of tokens in return order
    m = -1
    for g in by_return:
        m = max(m, g["token"])
        returned_max.append((g["t"], m))
    import bisect
    times = [x[0] for x in returned_max]
    for g in grants:
        i = bisect.bisect_left(times, g["start"]) - 1
        if i >= 0 and returned_max[i][1] >= g["token"]:
            violations.append(f"grant {g['token']} (requested at {g['start']:.3f}) is not above "
                              f"{returned_max[i][1]}, returned before it was requested")
            break
    # The test must have exercised something: writes on every leader, stale
    # writes tried, no crashed writer, no unexpected error.
    for e in events:
        if e["ev"] in ("kill", "switchover") and not any(
                a["t"] > e["t"] and a["node"] == e.get("new") for a in acks):
            violations.append(f"no acknowledged write on {e.get('new')} after the {e['ev']}")
    if not stale_ok and not stale_bad:
        violations.append("no stale write was tried")
    for r in recs:
        if r["ev"] in ("crash", "error"):
            violations.append(f"writer {r['w']}: {r['ev']}: {r['err']}")
    # 2. No stale write accepted.
    for s in stale_bad:
        violations.append(f"stale write with token {s['token']} accepted on {s['node']}")

    # 3. The final leader has every acknowledged write, in token order.
    found = leader(api_ports)
    if not found:
        violations.append("no leader at the end")
        report(recs, grants, acks, unknown, rejected, stale_ok, stale_bad, errors, events, None, violations)
        return 1
    name, host, port = found
    conn = connect(host, port, "ha-check")
    cur = conn.cursor()
    cur.execute("SELECT seq, token::bigint, writer, node FROM ha_history ORDER BY seq")
    history = cur.fetchall()
    cur.execute("SELECT token::bigint FROM ha_resource WHERE id = 1")
    row_token = cur.fetchone()[0]
    conn.close()
    hist_tokens = {h[1] for h in history}
    for a in acks:
        if a["token"] not in hist_tokens:
            violations.append(f"acknowledged write lost: token {a['token']} (writer {a['w']}, "
                              f"on {a['node']})")
    sent = {a["token"] for a in acks} | {u["token"] for u in unknown}
    for h in history:
        if h[1] not in sent:
            violations.append(f"history has token {h[1]} that no writer committed")
    prev = None
    for h in history:
        if prev is not None and h[1] <= prev[1]:
            violations.append(f"history seq {h[0]} has token {h[1]}, not above token {prev[1]} "
                              f"committed before it (seq {prev[0]})")
        prev = h
    max_hist = max(hist_tokens) if hist_tokens else None
    max_ack = max((a["token"] for a in acks), default=None)
    if row_token != max_hist:
        violations.append(f"protected row has token {row_token}, the highest committed is {max_hist}")
    in_doubt_landed = sorted(t for t in hist_tokens if t in {u["token"] for u in unknown})
    if row_token != max_ack and row_token not in in_doubt_landed:
        violations.append(f"protected row has token {row_token}, the highest acknowledged is {max_ack}")
    report(recs, grants, acks, unknown, rejected, stale_ok, stale_bad, errors, events,
           dict(leader=name, history=len(history), row_token=row_token, max_ack=max_ack,
                in_doubt_landed=in_doubt_landed), violations)
    return 1 if violations else 0


def report(recs, grants, acks, unknown, rejected, stale_ok, stale_bad, errors, events, final,
           violations):
    span = (max(r["t"] for r in recs) - min(r["t"] for r in recs)) if recs else 0
    print(f"grants: {len(grants)}, distinct tokens: {len({g['token'] for g in grants})}, "
          f"over {span:.0f} s of workload")
    print(f"acknowledged writes: {len(acks)}; fresh tokens refused because a higher one wrote "
          f"first: {len(rejected)}; commits in doubt (connection lost during COMMIT): {len(unknown)}")
    print(f"stale writes tried: {len(stale_ok) + len(stale_bad)}, refused with 55Z01: {len(stale_ok)}, "
          f"accepted: {len(stale_bad)}")
    if errors:
        print(f"other errors: {len(errors)}, e.g. {errors[0]['err']}")
    if final:
        print(f"final leader {final['leader']}: {final['history']} history rows; protected row "
              f"token {final['row_token']}, highest acknowledged {final['max_ack']}; "
              f"in-doubt commits that landed: {final['in_doubt_landed'] or 'none'}")
    # Write outage per fault: last ack before it, first ack after it.
    for e in events:
        if e["ev"] not in ("kill", "switchover"):
            continue
        before = [a["t"] for a in acks if a["t"] <= e["t"]]
        after = [a for a in acks if a["t"] > e["t"] and a["node"] != e["old"]]
        first_grant_after = min((g["token"] for g in grants if g["t"] > e["t"] and g["node"] != e["old"]),
                                default=None)
        first_new = min((g["t"] for g in grants if g["t"] > e["t"] and g["node"] != e["old"]),
                        default=e["t"])
        max_before = max((g["token"] for g in grants if g["t"] <= first_new and g["node"] == e["old"]),
                         default=None)
        msg = f"{e['ev']} of {e['old']}: new leader {e.get('new')} after {e.get('secs', 0):.1f} s (Patroni)"
        if before and after:
            msg += (f"; no acknowledged write for {after[0]['t'] - before[-1]:.1f} s; "
                    f"highest token granted by {e['old']} {max_before}, first granted by "
                    f"{after[0]['node']} {first_grant_after}")
        print(msg)
    if violations:
        print(f"VIOLATIONS ({len(violations)}):")
        for v in violations[:20]:
            print("  " + v)
    else:
        print("no violation: no token handed out twice, no stale write accepted, "
              "no acknowledged write lost")


def main():
    cmd = sys.argv[1]
    if cmd == "leader":
        found = leader(sys.argv[2:])
        if not found:
            return 1
        print(*found)
        return 0
    if cmd == "sync":
        s = sync_standby(sys.argv[2:])
        if not s:
            return 1
        print(s)
        return 0
    if cmd == "run":
        return run(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5:])
    if cmd == "check":
        return check(sys.argv[2], sys.argv[3], sys.argv[4:])
    return 2


if __name__ == "__main__":
    sys.exit(main())
