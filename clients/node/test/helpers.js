// What the tests share.  They run against the live server named by the PG*
// variables, as a role that may create the extension, tables, and revoke
// leases (a throwaway cluster's superuser).  Every test uses names of its own.

import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';

import pg from 'pg';

const HERE = fileURLToPath(new URL('.', import.meta.url));

// A new autocommit connection for set-up, inspection and plain writes.
export async function connectDb() {
  const db = new pg.Client({ application_name: 'pg_fencing node test' });
  await db.connect();
  await db.query('CREATE EXTENSION IF NOT EXISTS pg_fencing');
  return db;
}

// A lock or table name of this test's own.
export function newName() {
  return `js_${randomBytes(6).toString('hex')}`;
}

// The first value of the first row, or null.
export async function sql1(db, text, values) {
  const { rows } = await db.query(text, values);
  return rows.length === 0 ? null : Object.values(rows[0])[0];
}

// A table whose one row is written under lockName's lock-wide fence.
export async function protectedTable(db, table, lockName) {
  await db.query(`CREATE TABLE ${table} (id int PRIMARY KEY, token fencing_token, v text)`);
  await db.query(`INSERT INTO ${table} VALUES (1, NULL, 'initial')`);
  await db.query('SELECT fencing_protect($1, lock_name => $2)', [table, lockName]);
}

// Polls predicate every 20 ms for up to timeoutMs: its last answer.
export async function waitUntil(predicate, timeoutMs) {
  const end = performance.now() + timeoutMs;
  while (performance.now() < end) {
    if (await predicate()) return true;
    await sleep(20);
  }
  return predicate();
}

// A rejection within timeoutMs, or a failure naming what did not end.
export async function within(promise, timeoutMs, what) {
  let timer;
  const late = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not end within ${timeoutMs} ms`)), timeoutMs);
  });
  try {
    return await Promise.race([promise, late]);
  } finally {
    clearTimeout(timer);
  }
}

// Runs test/<script>.js in a process of its own, lines on stdin and stdout:
// child.lines holds every line it printed; child.nextLine(timeoutMs)
// resolves to the next one not yet taken.
export function startScript(script, ...args) {
  const child = spawn(process.execPath, [`${HERE}${script}.js`, ...args], { stdio: ['pipe', 'pipe', 'inherit'] });
  child.lines = [];
  let taken = 0;
  let buffered = '';
  child.stdout.setEncoding('utf8');
  child.stdout.on('data', (chunk) => {
    buffered += chunk;
    let at;
    while ((at = buffered.indexOf('\n')) >= 0) {
      child.lines.push(buffered.slice(0, at).trim());
      buffered = buffered.slice(at + 1);
    }
  });
  child.nextLine = async (timeoutMs) => {
    if (!(await waitUntil(() => child.lines.length > taken, timeoutMs))) {
      throw new Error(`no line from ${script} (pid ${child.pid}) within ${timeoutMs} ms`);
    }
    return child.lines[taken++];
  };
  child.exited = new Promise((resolve) => child.once('exit', resolve));
  return child;
}

// Kills a child (resumed first, if it was stopped) and waits for its end.
export async function kill(child) {
  if (child.exitCode !== null || child.signalCode !== null) return;
  child.kill('SIGCONT');
  child.kill('SIGKILL');
  await child.exited;
}

// A promise's outcome as it stands: state 'pending', then 'resolved' with
// value or 'rejected' with error; done settles when it does.
export function track(promise) {
  const tracked = { state: 'pending' };
  tracked.done = promise.then(
    (value) => Object.assign(tracked, { state: 'resolved', value }),
    (error) => Object.assign(tracked, { state: 'rejected', error }),
  );
  return tracked;
}
