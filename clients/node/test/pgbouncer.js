// A PgBouncer of a test's own, in front of the server named by the PG*
// variables: transaction pooling, default_pool_size server connections, on
// a free loopback port.  PgBouncer will not run as root: when the tests do
// (pg_virtualenv -t), it runs as postgres (or nobody), in a directory of
// its own that it owns.

import { execFileSync, spawn } from 'node:child_process';
import { chownSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import pg from 'pg';

import { waitUntil } from './helpers.js';

export const PGBOUNCER = process.env.PGBOUNCER ?? '/usr/sbin/pgbouncer';

export function havePgBouncer() {
  return existsSync(PGBOUNCER);
}

function freePort() {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.unref();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

// The uid and gid PgBouncer runs as when we are root.
function unprivileged() {
  for (const user of ['postgres', 'nobody']) {
    try {
      const uid = Number(execFileSync('id', ['-u', user], { encoding: 'utf8' }).trim());
      const gid = Number(execFileSync('id', ['-g', user], { encoding: 'utf8' }).trim());
      return { uid, gid };
    } catch {
      // no such user
    }
  }
  throw new Error('PgBouncer does not run as root, and there is neither a postgres nor a nobody user');
}

// Starts PgBouncer: { url (a connection string through it), stop() }.
export async function startPgBouncer({ poolSize = 5, maxClients = 500 } = {}) {
  const dir = mkdtempSync(join(tmpdir(), 'pg_fencing_node_bouncer.'));
  const port = await freePort();
  const env = process.env;
  const host = !env.PGHOST || env.PGHOST === 'localhost' ? '127.0.0.1' : env.PGHOST;
  const quote = (v) => `'${String(v).replace(/'/g, "''")}'`;
  const server = [
    `host=${quote(host)}`,
    `port=${env.PGPORT ?? 5432}`,
    `dbname=${quote(env.PGDATABASE ?? env.PGUSER ?? 'postgres')}`,
    `user=${quote(env.PGUSER ?? 'postgres')}`,
    ...(env.PGPASSWORD ? [`password=${quote(env.PGPASSWORD)}`] : []),
  ].join(' ');
  writeFileSync(
    join(dir, 'pgbouncer.ini'),
    `[databases]
app = ${server}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = ${port}
unix_socket_dir =
auth_type = any
pool_mode = transaction
default_pool_size = ${poolSize}
max_client_conn = ${maxClients}
logfile = ${join(dir, 'pgbouncer.log')}
pidfile = ${join(dir, 'pgbouncer.pid')}
`,
    { mode: 0o600 },
  );
  const options = { stdio: ['ignore', 'ignore', 'pipe'] };
  if (process.getuid?.() === 0) {
    Object.assign(options, unprivileged());
    chownSync(dir, options.uid, options.gid);
    chownSync(join(dir, 'pgbouncer.ini'), options.uid, options.gid);
  }
  const child = spawn(PGBOUNCER, [join(dir, 'pgbouncer.ini')], options);
  let stderr = '';
  child.stderr.setEncoding('utf8').on('data', (chunk) => (stderr += chunk));
  const exited = new Promise((resolve) => child.once('exit', resolve));
  const url = `postgresql://${encodeURIComponent(env.PGUSER ?? 'postgres')}@127.0.0.1:${port}/app`;
  const log = () => {
    try {
      return readFileSync(join(dir, 'pgbouncer.log'), 'utf8');
    } catch {
      return '';
    }
  };
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGINT');
      await exited;
    }
    rmSync(dir, { recursive: true, force: true });
  };
  const ready = await waitUntil(async () => {
    if (child.exitCode !== null) return false;
    const probe = new pg.Client({ connectionString: url });
    try {
      await probe.connect();
      await probe.query('SELECT 1');
      return true;
    } catch {
      return false;
    } finally {
      await probe.end().catch(() => {});
    }
  }, 10_000);
  if (!ready) {
    const why = `PgBouncer did not accept connections: ${stderr}${log()}`;
    await stop();
    throw new Error(why);
  }
  return { url, port, stop, log };
}
