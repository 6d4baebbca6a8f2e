# Sessions (1.8) through a database's life, on a server that preloads the
# library (its expiry worker running):
#
#  - a session that is not renewed loses every lease at once: the expiry
#    worker writes the session's end into each lease, marks each expired,
#    counts each expiry, and deletes the session, within seconds of its end
#    (10 s allowed for a loaded machine), with nobody calling anything;
#  - a session and its leases are as durable as plain leases: after a
#    crash (immediate stop) and a restart the session is still open with
#    its leases and its permit live and their tokens, and renews; a write
#    under one of them passes and a stale one is refused;
#  - close, after the restart, releases them all (the permit too) and
#    counts the releases;
#  - CALL fencing_await(..., session => id) waits for a lease in the
#    session holding no snapshot and no transaction id, and is woken by the
#    holder's release; a session that ends while it waits ends its wait
#    then, with 55Z05, and the next in line is served;
#  - such a CALL waits as a place in the lock's line (1.10), behind a
#    place that came first, is woken by the commit that tells its place,
#    and its place waits no more once it is cancelled.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('sessions');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'pg_fencing'");
$node->start;

sub sql { return $node->safe_psql('postgres', $_[0]); }

sql(q{
CREATE EXTENSION pg_fencing;
CREATE TABLE parts (id int PRIMARY KEY, token fencing_token, v text);
SELECT fencing_protect('parts', lock_name => 'part-1');
});

# 1. Expiry by the worker, all at once.
my $short = sql("SELECT fencing_session_open('short', '2 s')");
sql("SELECT fencing_session_acquire($short, 'exp-$_')") for 1 .. 3;
is(sql("SELECT leases FROM fencing_sessions WHERE session_id = $short"),
	'3', 'a session holds three leases');
my $end = sql("SELECT expires_at FROM fencing_sessions WHERE session_id = $short");
ok( $node->poll_query_until(
		'postgres',
		"SELECT NOT EXISTS (SELECT FROM fencing_session WHERE session_id = $short)
		   AND (SELECT count(*) FROM fencing_lease WHERE lock_name LIKE 'exp-%' AND ended = 'expired') = 3",
		't'),
	'the expiry worker ends the session and marks its three leases expired, nobody acting');
is( sql(
		"SELECT count(*) FILTER (WHERE expires_at = '$end' AND session_id IS NULL)
		   FROM fencing_lease WHERE lock_name LIKE 'exp-%'"),
	'3', "each lease ended at the session's end, and is in no session any more");
is(sql("SELECT sum(expiries) FROM fencing_lock_stats WHERE lock_name LIKE 'exp-%'"),
	'3', 'and each expiry was counted');
ok(sql("SELECT fencing_acquire('exp-2', 'next', '1 minute') IS NOT NULL") eq 't',
	'another holder takes a lock the ended session held');

# 2. Durable: a crash and a restart keep the session and its leases.
my $long = sql("SELECT fencing_session_open('long', '1 hour')");
my @tokens = map { sql("SELECT fencing_session_acquire($long, 'part-$_')") } 1 .. 2;
my $permit = sql(
	"SELECT fencing_session_acquire($long, 'pool', kind => 'permit', permits => 2)");
sql("INSERT INTO parts VALUES (1, '$tokens[0]', 'before the crash')");
$node->stop('immediate');
$node->start;
is(sql("SELECT live, leases FROM fencing_sessions WHERE session_id = $long"),
	't|3', 'after a crash the session is open with its two leases and its permit');
is( sql(
		"SELECT string_agg(token::text, ',' ORDER BY lock_name) FROM fencing_leases
		  WHERE session_id = $long AND live"),
	join(',', @tokens), '... the leases live, with their tokens');
is(sql("SELECT token FROM fencing_permits WHERE session_id = $long AND live"),
	$permit, '... and the permit, with its token');
is(sql("SELECT fencing_session_renew($long)"), 't', '... and it renews');
sql("UPDATE parts SET v = 'after the crash', token = '$tokens[0]' WHERE id = 1");
is(sql("SELECT v FROM parts"), 'after the crash', 'a write under its lease passes');
my ($ret, $out, $err) =
  $node->psql('postgres', "UPDATE parts SET token = '" . ($tokens[0] - 1) . "' WHERE id = 1");
like($err, qr/stale fencing token/, 'a stale one is refused');

# 3. Close releases both, counted as releases.
is(sql("SELECT fencing_session_close($long)"), '3', 'close releases both leases and the permit');
is(sql("SELECT state FROM fencing_permits WHERE lock_name = 'pool'"),
	'released', '... the permit too');
is( sql(
		"SELECT string_agg(state, ',' ORDER BY lock_name) FROM fencing_leases
		  WHERE lock_name LIKE 'part-%'"),
	'released,released', '... at once');
is(sql("SELECT sum(releases) FROM fencing_lock_stats WHERE lock_name LIKE 'part-%'"),
	'2', '... and counted as releases');

# 4. Waiting in a session without a snapshot.
sql("SELECT fencing_acquire('aw-1', 'leader', '1 hour')");
my $waiter_session = sql("SELECT fencing_session_open('aw-waiter', '1 hour')");

# Starts $call in a psql of its own named $name, once it is connected.
sub start_call
{
	my ($name, $call) = @_;
	my $psql = $node->background_psql('postgres', on_error_stop => 0);
	$psql->query_until(qr/started/,
		"SET application_name = '$name';\n\\echo started\n$call;\n\\echo finished\n");
	return $psql;
}

# $name's backend_xid and backend_xmin ('' when NULL), once it sleeps on
# its latch.
sub sleeping_ids
{
	my ($name) = @_;
	$node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM pg_stat_activity WHERE application_name = '$name' "
		  . "AND wait_event_type = 'Extension'")
	  or die "$name never slept on its latch";
	return sql("SELECT coalesce(backend_xid::text, '') || '/' || coalesce(backend_xmin::text, '') "
		  . "FROM pg_stat_activity WHERE application_name = '$name'");
}

my $first = start_call('aw-first',
	"CALL fencing_await('aw-1', session => $waiter_session, wait => '1 min')");
is(sleeping_ids('aw-first'), '/', 'a wait in a session holds no xid and no xmin');
sql("SELECT fencing_release('aw-1', token) FROM fencing_lease WHERE lock_name = 'aw-1'");
like($first->query_until(qr/finished/, ''), qr/^\s*\d+\s*$/m, 'the release wakes it with a token');
is(sql("SELECT holder, session_id = $waiter_session FROM fencing_leases WHERE lock_name = 'aw-1' AND live"),
	'aw-waiter|t', "... of a lease in the session, with the session's holder");
$first->quit;

# The session ends (3 s) while its wait (10 min, past any poll here) goes
# on; the lock's holder keeps it an hour, and no recheck wakes the waiter
# (pg_fencing.wait_recheck, an hour).  The wait ends at the session's end,
# and the plain waiter queued behind it is next in line.
sql("SELECT fencing_acquire('aw-2', 'leader', '1 hour')");
my $brief = sql("SELECT fencing_session_open('aw-brief', '3 s')");
$first = start_call('aw-first',
	"SET pg_fencing.wait_recheck = '1h'; "
	  . "CALL fencing_await('aw-2', session => $brief, wait => '10 min')");
sleeping_ids('aw-first');
my $second = start_call('aw-second', "CALL fencing_await('aw-2', 'second', '1 hour', '10 min')");
ok( $node->poll_query_until(
		'postgres',
		"SELECT NOT EXISTS (SELECT FROM pg_stat_activity WHERE application_name = 'aw-first' "
		  . "AND state = 'active')"),
	"a wait in a session ends at the session's end");
$first->query_until(qr/finished/, '');
like($first->{stderr}, qr/fencing session \d+ does not exist or has ended/,
	'... with 55Z05 (the session has ended)');
$first->quit;
sql("SELECT fencing_release('aw-2', token) FROM fencing_lease WHERE lock_name = 'aw-2'");
like($second->query_until(qr/finished/, ''), qr/^\s*\d+\s*$/m,
	'the waiter behind it is served at the release');
is(sql("SELECT holder FROM fencing_leases WHERE lock_name = 'aw-2' AND live"),
	'second', '... and holds the lock');
$second->quit;

# 5. A CALL with a session waits as a place in the lock's line (1.10): in
# arrival order among the candidates that poll from outside, woken by the
# commit that tells its place (no recheck: pg_fencing.wait_recheck is an
# hour, the holder's lease too), and its place waits no more once the
# CALL is cancelled.
sql("SELECT fencing_acquire('aw-3', 'leader', '1 hour')");
my $poller = sql("SELECT fencing_session_open('aw-poller', '1 hour')");
my $poller_place = sql("SELECT place FROM fencing_line_join($poller, 'aw-3')");
my $caller = sql("SELECT fencing_session_open('aw-caller', '1 hour')");
$first = start_call('aw-caller',
	"SET pg_fencing.wait_recheck = '1h'; "
	  . "CALL fencing_await('aw-3', session => $caller, wait => '1 min')");
sleeping_ids('aw-caller');
is( sql("SELECT string_agg(holder, ',' ORDER BY place) FROM fencing_lines WHERE lock_name = 'aw-3'"),
	'aw-poller,aw-caller', "the CALL's wait is a place in line, behind the one that came first");
sql("SELECT fencing_release('aw-3', token) FROM fencing_lease WHERE lock_name = 'aw-3'");
is(sql("SELECT state FROM fencing_line_poll(ARRAY[$poller_place])"),
	'granted', 'at the release the first place takes the lock, not the CALL behind it');
sql("SELECT fencing_line_leave($poller_place)");
like($first->query_until(qr/finished/, ''), qr/^\s*\d+\s*$/m,
	"the place's release wakes the CALL, which takes the lock");
is(sql("SELECT holder FROM fencing_leases WHERE lock_name = 'aw-3' AND live"),
	'aw-caller', '... in its session');
$first->quit;

# Cancelled while it waits first in line: its place is stepped over at
# once, not held until the CALL's wait would have run out.
sql("SELECT fencing_release('aw-3', token) FROM fencing_lease WHERE lock_name = 'aw-3'");
sql("SELECT fencing_acquire('aw-3', 'leader', '1 hour')");
$first = start_call('aw-caller',
	"CALL fencing_await('aw-3', session => $caller, wait => '10 min')");
sleeping_ids('aw-caller');
$poller_place = sql("SELECT place FROM fencing_line_join($poller, 'aw-3')");
sql("SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE application_name = 'aw-caller'");
$first->query_until(qr/finished/, '');
like($first->{stderr}, qr/canceling statement due to user request/, 'the CALL is cancelled');
$first->quit;
sql("SELECT fencing_release('aw-3', token) FROM fencing_lease WHERE lock_name = 'aw-3'");
is(sql("SELECT state FROM fencing_line_poll(ARRAY[$poller_place])"),
	'granted', "the next place takes the lock at once: the cancelled CALL's place waits no more");

# 6. The expiry worker runs as a superuser, with its database's settings:
# a database owner's search_path puts an operator of theirs in front of
# pg_catalog's, and the worker's statements must not run it (before 1.10
# its marking of expired leases compared lock names with it).
sql("CREATE ROLE db_owner");
sql("CREATE DATABASE owned OWNER db_owner");
my $in_owned = sub { return $node->safe_psql('owned', "SET search_path = pg_catalog, public; $_[0]"); };
$in_owned->(q{
CREATE EXTENSION pg_fencing SCHEMA public;
SET ROLE db_owner;
CREATE SCHEMA owner_ops;
CREATE TABLE owner_ops.ran_as (who text);
CREATE FUNCTION owner_ops.texteq(a text, b text) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
  IF current_user <> 'db_owner' THEN
    INSERT INTO owner_ops.ran_as VALUES (current_user);
  END IF;
  RETURN a OPERATOR(pg_catalog.=) b;
END $$;
CREATE OPERATOR owner_ops.= (LEFTARG = text, RIGHTARG = text, FUNCTION = owner_ops.texteq);
ALTER DATABASE owned SET search_path = owner_ops, pg_catalog, public;
});
$in_owned->("SELECT fencing_acquire('in-owned', 'holder', '1 s')");
ok( $node->poll_query_until(
		'owned',
		"SELECT ended IS NOT NULL FROM public.fencing_lease "
		  . "WHERE lock_name OPERATOR(pg_catalog.=) 'in-owned'"),
	"the worker marks the owned database's expired lease");
is($in_owned->("SELECT count(*) FROM owner_ops.ran_as"),
	'0', "... without running the database owner's operator");

$node->stop;
done_testing();
