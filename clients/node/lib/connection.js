// The client's own connections (pg.Client, autocommit), and the units of
// its options: seconds, as in every pg_fencing client, turned into the
// milliseconds timers and interval texts use.

import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';

import pg from 'pg';

// host:pid:random, new at each call: two leases or sessions of one process
// never share a grant.
export function defaultHolder() {
  return `${hostname()}:${process.pid}:${randomBytes(4).toString('hex')}`;
}

// Milliseconds from an option given in seconds; RangeError, naming it, for
// anything but a positive (or, with zeroOk, non-negative) number.
export function millis(seconds, option, { zeroOk = false, infinityOk = false } = {}) {
  const ok =
    typeof seconds === 'number' &&
    (zeroOk ? seconds >= 0 : seconds > 0) &&
    (infinityOk || Number.isFinite(seconds));
  if (!ok) {
    const wanted = zeroOk ? 'a number of seconds >= 0' : 'a positive number of seconds';
    throw new RangeError(`${option} must be ${wanted}${infinityOk ? ' (or Infinity)' : ''}, got ${String(seconds)}`);
  }
  return seconds * 1000;
}

// '1500 milliseconds': a text the SQL casts to interval.
export function interval(ms, atLeastMs = 1) {
  return `${Math.max(atLeastMs, Math.round(ms))} milliseconds`;
}

// Keeps the connection config (it may hold a password, or be a URL with
// one) as target.config, readable but not enumerable: util.inspect, a
// logger and JSON.stringify leave it out, as node-postgres does with the
// password of its own clients.
export function keepConfig(target, config) {
  Object.defineProperty(target, 'config', { value: config, enumerable: false });
}

// A connected pg.Client from a pg.Client config or a connection string
// (undefined: the PG* variables), named applicationName unless the config
// names it.  Its 'error' event (the connection ended unexpectedly: server
// restart, terminated backend, network) goes to onError: unhandled, it
// would crash the process.
export async function connect(config, applicationName, onError = () => {}) {
  const options = typeof config === 'string' ? { connectionString: config } : { ...config };
  options.application_name ??= applicationName.slice(0, 63);
  const client = new pg.Client(options);
  client.on('error', (err) => onError(client, err));
  try {
    await client.connect();
  } catch (err) {
    await client.end().catch(() => {});
    throw err;
  }
  return client;
}

export async function end(client) {
  if (client) await client.end().catch(() => {});
}

// fn(client) on a connection of its own, ended afterwards.
export async function withConnection(config, applicationName, fn) {
  const client = await connect(config, applicationName);
  try {
    return await fn(client);
  } finally {
    await end(client);
  }
}

// Whether a connection may be made again after err: a broken or refused
// connection (no SQLSTATE: a socket error or an unexpected end; class 08;
// 57P0x, the server shutting down or starting; 53, too many connections)
// may mend by itself.  Anything else -- a wrong password (28P01), a database
// or extension that is not there, a privilege missing -- would fail the same
// way forever, and is thrown instead of being retried in silence.
export function mayMend(err) {
  const code = typeof err?.code === 'string' && /^[0-9A-Z]{5}$/.test(err.code) ? err.code : null;
  return code === null || /^(08|53|57P0)/.test(code);
}

// After the first failure at once, then 100 ms, doubling up to 5 s.
export function reconnectDelayMs(failures) {
  return failures <= 1 ? 0 : Math.min(5000, 100 * 2 ** (failures - 2));
}

// The first value of the first row, or null.
export async function value(client, sql, values) {
  const { rows } = await client.query(sql, values);
  return rows.length === 0 ? null : Object.values(rows[0])[0];
}
