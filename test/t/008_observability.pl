# Seeing leadership and fencing happen, on a server that preloads the
# library (shared_preload_libraries = 'pg_fencing'):
#
#  - announcements on channel fencing_events: what each change of a lease
#    sends, only for a lock whose owner asked for it, only if the
#    transaction commits (a grant rolled back, or in a savepoint rolled
#    back, announces nothing), in commit order;
#  - the expiry worker announces a lease that ran out with nobody acting on
#    it, within seconds (docs/observability.md's bound is about a second; 10 s here
#    leaves room for a loaded machine);
#  - fencing_lock_stats, fencing_table_stats and fencing_rejections count
#    and record refused writes although their transactions roll back, and
#    show each role only its own locks and tables (all of them to
#    pg_read_all_stats);
#  - the statistics survive a clean restart and are gone after a crash, as
#    PostgreSQL's own; fencing_stats_reset() empties them.
#
# A listener is a psql that LISTENs and then blocks on an advisory lock the
# test holds: the notifications that reach it meanwhile are printed when
# the lock is released and its statement returns.

use strict;
use warnings;

use IPC::Run;
use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

my $node = PostgreSQL::Test::Cluster->new('observability');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'pg_fencing'");
# The crash below must be followed by the postmaster's restart.
$node->append_conf('postgresql.conf', "restart_after_crash = on");
$node->start;

$node->safe_psql(
	'postgres', q{
CREATE EXTENSION pg_fencing;
CREATE ROLE tenant_a LOGIN;
CREATE ROLE tenant_b LOGIN;
CREATE ROLE a_writer LOGIN;
CREATE ROLE monitor LOGIN IN ROLE pg_monitor;
SELECT fencing_create_lock('watched', 'tenant_a');
SELECT fencing_create_lock('quiet', 'tenant_a');
SELECT fencing_create_lock('b-lock', 'tenant_b');
SELECT fencing_grant_lock('watched', 'a_writer');
CREATE TABLE ledger (id int PRIMARY KEY, token fencing_token, entry text);
ALTER TABLE ledger OWNER TO tenant_a;
GRANT SELECT, INSERT, UPDATE ON ledger TO a_writer;
CREATE TABLE b_table (id int PRIMARY KEY, token fencing_token);
ALTER TABLE b_table OWNER TO tenant_b;
});
# Preloaded, the prefix pg_fencing. is reserved: a misspelt setting is an
# error in SET and ALTER SYSTEM, not a placeholder that does nothing, while a
# real one is set (docs/settings.md, "Misspelt names").
{
	my ($ret, $out, $err) =
	  $node->psql('postgres', 'SET pg_fencing.fast_updates = off');
	isnt($ret, 0, 'preloaded: SET of a misspelt pg_fencing setting fails');
	like($err, qr/"pg_fencing" is a reserved prefix/, '... saying the prefix is reserved');
	($ret, $out, $err) =
	  $node->psql('postgres', 'ALTER SYSTEM SET pg_fencing.rejection_kept = 10');
	isnt($ret, 0, '... and so does ALTER SYSTEM');
	# (15 refuses ALTER SYSTEM of any name no library defines, "unrecognized
	# configuration parameter"; from 17 only the reserved prefix makes it
	# fail, "invalid configuration parameter name".)
	like($err, qr/(unrecognized|invalid) configuration parameter/, '... naming the parameter');
	is($node->safe_psql('postgres', 'SET pg_fencing.fast_update = off; SHOW pg_fencing.fast_update'),
		'off', 'a defined setting is set');
}

$node->safe_psql('postgres', "SELECT fencing_protect('ledger', lock_name => 'watched')",
	extra_params => [ '-U', 'tenant_a' ]);
$node->safe_psql('postgres', "SELECT fencing_protect('b_table')",
	extra_params => [ '-U', 'tenant_b' ]);
$node->safe_psql('postgres', "SELECT fencing_set_announce('watched', true)",
	extra_params => [ '-U', 'tenant_a' ]);

# psql as $role (superuser by default), stopping at the first error.
sub sql
{
	my ($query, $role) = @_;
	return $node->safe_psql('postgres', $query,
		extra_params => defined $role ? [ '-U', $role ] : []);
}

# Runs $query as $role, which must fail; returns its stderr.
sub sql_error
{
	my ($query, $role, $app) = @_;
	my $connstr = $node->connstr('postgres') . " user=$role";
	$connstr .= " application_name=$app" if defined $app;
	my ($out, $err) = ('', '');
	IPC::Run::run([ 'psql', '-XAtq', '-v', 'ON_ERROR_STOP=1', '-d', $connstr, '-c', $query ],
		'>', \$out, '2>', \$err);
	isnt($? >> 8, 0, "refused as $role: $query");
	return $err;
}

# ---- Listening -------------------------------------------------------------

my $gate = $node->background_psql('postgres');
my $listeners = 0;

# Starts a listener; returns a handle for stop_listening.
sub start_listening
{
	my $name = 'listener' . ++$listeners;
	$gate->query_safe('SELECT pg_advisory_lock(4711)');
	my ($out, $err) = ('', '');
	my $h = IPC::Run::start(
		[
			'psql', '-XAtq', '-v', 'ON_ERROR_STOP=1',
			'-c', 'LISTEN fencing_events',
			'-c', 'SELECT pg_advisory_lock(4711)',
			'-d', $node->connstr('postgres') . " application_name=$name"
		],
		'>', \$out, '2>', \$err);
	$node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM pg_stat_activity WHERE application_name = '$name' "
		  . "AND wait_event_type = 'Lock'")
	  or die "$name never started to wait";
	return { h => $h, out => \$out, err => \$err };
}

# Lets the listener return; returns the payloads it got, decoded, in order.
sub stop_listening
{
	my ($listener) = @_;
	$gate->query_safe('SELECT pg_advisory_unlock(4711)');
	$listener->{h}->finish;
	my @events;
	for my $line (split /\n/, ${ $listener->{out} })
	{
		next
		  unless $line =~
		  /^Asynchronous notification "fencing_events" with payload "(.*)" received from server process with PID \d+\.$/;
		push @events, decode_json($1);
	}
	return @events;
}

sub summary
{
	return join ', ', map {
		"$_->{lock_name} $_->{event} "
		  . ($_->{holder} // 'none')
		  . (exists $_->{takeover} && $_->{takeover} ? ' takeover' : '')
	} @_;
}

# ---- What each change announces ----------------------------------------------

my $listener = start_listening();
my $t1 = sql("SELECT fencing_acquire('watched', 'node-1', '1 minute')", 'a_writer');
sql("SELECT fencing_renew('watched', '$t1', '1 minute')", 'a_writer');
sql("SELECT fencing_release('watched', '$t1')", 'a_writer');
my $t2 = sql("SELECT fencing_acquire('watched', 'node-2', '200 ms')", 'a_writer');
sql("SELECT pg_sleep(0.3)");
# A lock not announced: nothing, whatever happens to it.
my $q = sql("SELECT fencing_acquire('quiet', 'node-q', '1 minute')", 'tenant_a');
sql("SELECT fencing_release('quiet', '$q')", 'tenant_a');
# A grant rolled back, and one in a savepoint rolled back: nothing.
sql("BEGIN; SELECT fencing_acquire('watched', 'rolled-back', '1 minute'); ROLLBACK", 'a_writer');
sql("BEGIN; SAVEPOINT s; SELECT fencing_acquire('watched', 'in-savepoint', '1 minute'); "
	  . "ROLLBACK TO SAVEPOINT s; COMMIT", 'a_writer');
# node-3 takes over the expired lease (unless the worker announced the
# expiry first, the grant announces it).
my $t3 = sql("SELECT fencing_acquire('watched', 'node-3', '1 minute')", 'a_writer');
my $revoke_mark = sql("SELECT fencing_revoke('watched', 'drill')", 'tenant_a');
my @events = stop_listening($listener);

is( summary(@events),
	'watched granted node-1, watched released node-1, watched granted node-2, '
	  . 'watched expired node-2, watched granted node-3 takeover, watched revoked node-3',
	'each grant, release, expiry, takeover and revoke is announced, in order; nothing for a lock not announced or a grant rolled back'
);
is_deeply(
	[ map { $_->{token} } @events ],
	[ $t1, $t1, $t2, $t2, $t3, $t3 ],
	'each announcement carries the token of its lease, as a string');
my $lock_id = sql("SELECT lock_id FROM fencing_locks WHERE lock_name = 'watched'");
is_deeply(
	[ grep { $_->{lock_id} ne $lock_id } @events ],
	[], 'and the lock\'s lock_id');
my ($takeover) = grep { $_->{event} eq 'granted' && $_->{holder} eq 'node-3' } @events;
is_deeply(
	[ $takeover->{takeover}, $takeover->{previous_holder}, $takeover->{previous_token} ],
	[ JSON::PP::true, 'node-2', $t2 ],
	'a takeover names the lease it replaced');
my ($first) = grep { $_->{event} eq 'granted' } @events;
ok(!$first->{takeover} && !defined $first->{previous_holder},
	'a lock\'s first grant replaced nothing');
like($events[0]{at}, qr/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d/, 'with the time of the change');

# Commit order, not the order the grants were made in: a grant made first
# but committed last is announced last.
$listener = start_listening();
my $early = $node->background_psql('postgres');
$early->query_safe('BEGIN');
$early->query_safe("SELECT fencing_acquire('watched', 'made-first', '1 minute')");
sql("SELECT fencing_set_announce('quiet', true)", 'tenant_a');
sql("SELECT fencing_acquire('quiet', 'made-second', '1 minute')");
$early->query_safe('COMMIT');
@events = stop_listening($listener);
is( summary(@events),
	'quiet granted made-second, watched granted made-first',
	'announcements come in commit order');
$early->query_safe("SELECT fencing_release(lock_name, token) FROM fencing_leases WHERE holder = 'made-first'");
$early->quit;
sql("SELECT fencing_release(lock_name, token) FROM fencing_leases WHERE holder = 'made-second'");

# ---- The expiry worker ----------------------------------------------------------

$listener = start_listening();
sql("SELECT fencing_acquire('quiet', 'expiring', '300 ms')");
my $end = sql("SELECT expires_at FROM fencing_leases WHERE lock_name = 'quiet'");
my $marked = $node->poll_query_until('postgres',
	"SELECT ended = 'expired' FROM fencing_lease WHERE lock_name = 'quiet'");
ok($marked, 'the worker marks a lease that ran out');
@events = stop_listening($listener);
my ($expiry) = grep { $_->{event} eq 'expired' && $_->{holder} eq 'expiring' } @events;
ok($expiry, 'and announces its expiry with nobody acting on the lock');
my $delay = sql("SELECT extract(epoch FROM '$expiry->{at}'::timestamptz - '$end'::timestamptz)");
cmp_ok($delay, '<', 10, "within seconds of its end (here: $delay s)");
cmp_ok($delay, '>=', 0, 'and not before');
note "expiry announced $delay s after the lease's end";

# ---- Counters and the record of refused writes -----------------------------

# a_writer writes under node-3's revoked lease: stale.  Without a token:
# missing.  Both roll back, both are counted and recorded.
sql("SELECT fencing_acquire('watched', 'node-4', '1 minute')", 'a_writer');
my $err = sql_error(
	"BEGIN; SELECT fencing_present('watched', '$t3'); INSERT INTO ledger VALUES (1, NULL, 'zombie')",
	'a_writer', 'zombie-app');
like($err, qr/stale fencing token $t3 for lock "watched"/,
	'presenting the revoked token is refused');
$err = sql_error("INSERT INTO ledger VALUES (3, '$t3', 'zombie row')", 'a_writer', 'zombie-app');
like($err, qr/stale fencing token $t3 for table "ledger"/,
	'a write carrying the revoked token is refused');
$err = sql_error("INSERT INTO ledger VALUES (2, NULL, 'no token')", 'a_writer', 'careless-app');
like($err, qr/missing fencing token/, 'a write without a token is refused');
sql("INSERT INTO b_table VALUES (1, 10)", 'tenant_b');
sql_error("UPDATE b_table SET token = 5", 'tenant_b', 'b-app');

my $mark = sql("SELECT high_water FROM fencing_fences WHERE lock_name = 'watched'");
is( sql(
		"SELECT grants, renewals, releases, expiries, takeovers, revokes, stale_rejections, missing_rejections "
		  . "FROM fencing_lock_stats WHERE lock_name = 'watched'"),
	'5|1|2|1|1|1|2|1',
	'fencing_lock_stats counts committed grants (not rolled-back ones), renewals, releases, expiries, takeovers, revokes and refused writes'
);
is( sql("SELECT relid, stale_rejections, missing_rejections FROM fencing_table_stats ORDER BY relid::text"),
	"b_table|1|0\nledger|1|1",
	'fencing_table_stats counts refused writes per table');
is( sql(
		"SELECT relid, lock_name, token, mark, sqlstate, role, application_name, client_addr IS NULL "
		  . "FROM fencing_rejections ORDER BY at"),
	"|watched|$t3|$mark|55Z01|a_writer|zombie-app|t\n"
	  . "ledger|watched|$t3|$mark|55Z01|a_writer|zombie-app|t\n"
	  . "ledger|watched|||55Z02|a_writer|careless-app|t\n"
	  . "b_table||5|10|55Z01|tenant_b|b-app|t",
	'fencing_rejections records each refused write, the token refused by fencing_present() on no table (client_addr is NULL over a unix socket)');
is( sql("SELECT waiting FROM fencing_lock_stats WHERE lock_name = 'watched'"),
	'0', 'nobody waiting');
# Places in the lock's line (1.10) are its waiters too: two live ones
# count, a place whose wait has run out does not (nor the holder's).
sql("SELECT fencing_create_lock('watched-line', 'tenant_a')");
my $holder_session = sql("SELECT fencing_session_open('in-line-0', '1 hour')", 'tenant_a');
sql("SELECT token IS NOT NULL FROM fencing_line_join($holder_session, 'watched-line')", 'tenant_a');
for my $n (1 .. 2)
{
	my $s = sql("SELECT fencing_session_open('in-line-$n', '1 hour')", 'tenant_a');
	sql("SELECT place FROM fencing_line_join($s, 'watched-line')", 'tenant_a');
}
my $brief = sql("SELECT fencing_session_open('in-line-brief', '1 hour')", 'tenant_a');
sql("SELECT place FROM fencing_line_join($brief, 'watched-line', '10 ms')", 'tenant_a');
sql("SELECT pg_sleep(0.05)");
is( sql("SELECT waiting FROM fencing_lock_stats WHERE lock_name = 'watched-line'"),
	'2', 'the live places waiting in the lock\'s line count as its waiters');
sql("SELECT fencing_session_close(session_id) FROM fencing_sessions WHERE holder LIKE 'in-line-%'",
	'tenant_a');

# ---- Permits (1.4): announced and counted as leases are ----------------------------

sql("SELECT fencing_create_lock('watched-sem', 'tenant_a')");
sql("SELECT fencing_set_announce('watched-sem', true)", 'tenant_a');
$listener = start_listening();
my $p1 = sql("SELECT fencing_acquire_permit('watched-sem', 'p-1', 1, '200 ms')", 'tenant_a');
sql("SELECT pg_sleep(0.3)");
# The slot's lease ran out: the grant of the slot announces that expiry first.
my $p2 = sql("SELECT fencing_acquire_permit('watched-sem', 'p-2', 1, '1 minute')", 'tenant_a');
sql("SELECT fencing_renew('watched-sem', '$p2', '1 minute')", 'tenant_a');
sql("SELECT fencing_release('watched-sem', '$p2')", 'tenant_a');
# Refused (no free permit) and rolled back: nothing.
my $p3 = sql("SELECT fencing_acquire_permit('watched-sem', 'p-3', 1, '1 minute')", 'tenant_a');
sql("SELECT fencing_acquire_permit('watched-sem', 'p-4', 1, '1 minute')", 'tenant_a');
sql("BEGIN; SELECT fencing_release('watched-sem', '$p3'); ROLLBACK", 'tenant_a');
@events = stop_listening($listener);
is( summary(@events),
	'watched-sem granted p-1, watched-sem expired p-1, watched-sem granted p-2, '
	  . 'watched-sem released p-2, watched-sem granted p-3',
	'a permit\'s grant, expiry and release are announced, in order; nothing for a refused acquire or a release rolled back'
);
is_deeply([ map { $_->{token} } @events ], [ $p1, $p1, $p2, $p2, $p3 ],
	'each with its permit\'s token');
is( sql("SELECT grants, renewals, releases, expiries FROM fencing_lock_stats WHERE lock_name = 'watched-sem'"),
	'3|1|1|1', 'and counted in fencing_lock_stats, the renewal too');

# The worker looks at permits and shared leases too (1.7): one that runs out
# with nobody acting on its lock is marked, announced and counted.
sql("SELECT fencing_create_lock('quiet-sem', 'tenant_a'); SELECT fencing_set_announce('quiet-sem', true); "
	  . "SELECT fencing_create_lock('quiet-shared', 'tenant_a'); SELECT fencing_set_announce('quiet-shared', true)");
$listener = start_listening();
my $lone_permit = sql("SELECT fencing_acquire_permit('quiet-sem', 'lone-permit', 2, '300 ms')", 'tenant_a');
my $lone_shared = sql("SELECT fencing_acquire_shared('quiet-shared', 'lone-reader', '300 ms')", 'tenant_a');
ok( $node->poll_query_until('postgres',
		"SELECT count(*) = 2 FROM fencing_permit WHERE holder IN ('lone-permit', 'lone-reader') AND ended = 'expired'"),
	'the worker marks a permit and a shared lease that ran out');
@events = stop_listening($listener);
# One statement marks both: in no particular order.
my @expiries = sort { $a->{holder} cmp $b->{holder} } grep { $_->{event} eq 'expired' } @events;
is( summary(@expiries),
	'quiet-sem expired lone-permit, quiet-shared expired lone-reader',
	'and announces their expiries with nobody acting on the locks');
is_deeply([ map { $_->{token} } @expiries ], [ $lone_permit, $lone_shared ], 'with their tokens');
is( sql("SELECT string_agg(lock_name || ':' || expiries, ',' ORDER BY lock_name) FROM fencing_lock_stats "
		  . "WHERE lock_name IN ('quiet-sem', 'quiet-shared')"),
	'quiet-sem:1,quiet-shared:1', 'and counts them');

# A grant that meets the worker marking the same slot waits for the mark
# and announces the expiry no second time.  The marking transaction here
# plays the worker: it locks the slot before the lease runs out (so that
# the real worker skips it), marks it, and holds it while the grant comes.
sql("SELECT fencing_create_lock('race-sem', 'tenant_a'); SELECT fencing_set_announce('race-sem', true)");
$listener = start_listening();
my $doomed = sql("SELECT fencing_acquire_permit('race-sem', 'doomed', 1, '1 s')", 'tenant_a');
my $marker = $node->background_psql('postgres');
$marker->query_safe(
	"BEGIN; SELECT 1 FROM fencing_permit WHERE token = '$doomed' FOR NO KEY UPDATE");
$node->poll_query_until('postgres',
	"SELECT clock_timestamp() > expires_at FROM fencing_permits WHERE lock_name = 'race-sem'")
  or die 'the doomed permit never ran out';
$marker->query_safe('SELECT fencing_announce_expiries()');
my ($next_out, $next_err) = ('', '');
my $next = IPC::Run::start(
	[
		'psql', '-XAtq', '-v', 'ON_ERROR_STOP=1', '-c',
		"SELECT fencing_acquire_permit('race-sem', 'next', 1, '1 minute')", '-d',
		$node->connstr('postgres') . ' user=tenant_a application_name=race-next'
	],
	'>', \$next_out, '2>', \$next_err);
$node->poll_query_until('postgres',
	"SELECT count(*) = 1 FROM pg_stat_activity WHERE application_name = 'race-next' "
	  . "AND wait_event_type = 'Lock'")
  or die 'the grant never waited for the marking transaction';
$marker->query_safe('COMMIT');
$marker->quit;
$next->finish;
chomp $next_out;
cmp_ok($next_out, '>', $doomed, 'the grant after the marking got the slot') or diag $next_err;
@events = stop_listening($listener);
is( summary(@events),
	'race-sem granted doomed, race-sem expired doomed, race-sem granted next',
	'its expiry announced once, by the marking');
is( sql("SELECT expiries FROM fencing_lock_stats WHERE lock_name = 'race-sem'"),
	'1', 'and counted once');

# The holder of a live permit that takes it again (a retry after a lost
# reply) keeps its token, and that counts as a renewal, as for an exclusive
# lease (1.7: the attempt in C).
my $renewals = sql("SELECT renewals FROM fencing_lock_stats WHERE lock_name = 'race-sem'");
is(sql("SELECT fencing_acquire_permit('race-sem', 'next', 1, '1 minute')", 'tenant_a'),
	$next_out, 'the holder of a live permit taking it again keeps its token');
is(sql("SELECT renewals FROM fencing_lock_stats WHERE lock_name = 'race-sem'"),
	$renewals + 1, 'and that counts as a renewal');

# ---- Who sees what -------------------------------------------------------------

is( sql("SELECT string_agg(lock_name, ',' ORDER BY lock_name) FROM fencing_lock_stats", 'tenant_b'),
	'b-lock', 'a tenant sees only its own locks\' counters');
is( sql("SELECT string_agg(relid::text, ',') FROM fencing_table_stats", 'tenant_b'),
	'b_table', 'and only its own tables\'');
is( sql("SELECT string_agg(relid::text, ',') FROM fencing_rejections", 'tenant_b'),
	'b_table', 'and only the refused writes on its tables');
is( sql("SELECT count(*) FROM fencing_lock_counters() WHERE lock_name <> 'b-lock'", 'tenant_b'),
	'0', 'the function behind the view shows it no more');
is( sql(
		"SELECT string_agg(coalesce(role::text, '-') || '/' || coalesce(application_name, '-'), ',' ORDER BY at) "
		  . "FROM fencing_rejections",
		'tenant_a'),
	'-/-,-/-,-/-',
	'the owner of the table sees its refused writes, but not another role\'s name or application');
is( sql(
		"SELECT string_agg(role::text || '/' || application_name, ',' ORDER BY at) FROM fencing_rejections",
		'a_writer'),
	'a_writer/zombie-app,a_writer/zombie-app,a_writer/careless-app',
	'the role that wrote sees its own');
is( sql("SELECT count(*) FROM fencing_lock_stats", 'monitor')
	  . ' '
	  . sql("SELECT count(*) FROM fencing_rejections WHERE role IS NOT NULL", 'monitor'),
	'8 4', 'pg_monitor (pg_read_all_stats) sees every lock (watched, watched-line, quiet, b-lock, watched-sem, quiet-sem, quiet-shared, race-sem) and every refused write in full');
like(sql_error('SELECT fencing_stats_reset()', 'tenant_a'),
	qr/permission denied/, 'only a superuser resets the statistics');

# A leaky function of another tenant's sees no lock name it may not read
# (the views are security barriers).
sql('CREATE SCHEMA b_schema AUTHORIZATION tenant_b');
sql(q{CREATE FUNCTION b_schema.peek(text) RETURNS boolean LANGUAGE plpgsql COST 0.0000001 AS
  'BEGIN RAISE NOTICE ''peeked: %'', $1; RETURN true; END'}, 'tenant_b');
for my $view ('fencing_lock_stats', 'fencing_leases', 'fencing_history')
{
	my ($ret, $out, $err) = $node->psql('postgres', "SELECT count(*) FROM $view WHERE b_schema.peek(lock_name)",
		extra_params => [ '-U', 'tenant_b' ]);
	unlike($err, qr/peeked: (watched|quiet)/, "a leaky function sees no foreign lock name through $view");
}

# More locks in one transaction than the counts keep in their static room:
# every one counted.
sql("SELECT count(fencing_acquire('many-' || i, 'h', '1 minute')) FROM generate_series(1, 40) i");
is(sql("SELECT sum(grants) FROM fencing_lock_stats WHERE lock_name LIKE 'many-%'"),
	'40', 'forty grants in one transaction are forty grants');

# A revoke that finds no live lease ends none: nothing counted.
sql("SELECT fencing_release('many-1', token) FROM fencing_leases WHERE lock_name = 'many-1'");
sql("SELECT fencing_revoke('many-1')");
is(sql("SELECT revokes FROM fencing_lock_stats WHERE lock_name = 'many-1'"),
	'0', 'a revoke of a lock with no live lease counts no revoke');

# A transaction holding an expired lease's row does not stall the worker:
# it marks the others and comes back for that one.
sql("SELECT fencing_acquire('held-row', 'h', '200 ms'), fencing_acquire('free-row', 'f', '400 ms')");
my $holder = $node->background_psql('postgres');
$holder->query_safe('BEGIN');
$holder->query_safe("SELECT 1 FROM fencing_lease WHERE lock_name = 'held-row' FOR UPDATE");
ok( $node->poll_query_until('postgres',
		"SELECT ended = 'expired' FROM fencing_lease WHERE lock_name = 'free-row'"),
	'the worker marks an expiry while another expired lease\'s row is locked');
is(sql("SELECT ended IS NULL FROM fencing_lease WHERE lock_name = 'held-row'"),
	't', 'and leaves the locked one');
$holder->query_safe('COMMIT');
ok( $node->poll_query_until('postgres',
		"SELECT ended = 'expired' FROM fencing_lease WHERE lock_name = 'held-row'"),
	'which it marks once the row is free');
$holder->quit;

# The launcher comes back when it is terminated.
my $launcher = "SELECT pid FROM pg_stat_activity WHERE backend_type = 'pg_fencing expiry launcher'";
ok(sql($launcher) =~ /^\d+$/, 'the expiry launcher runs');
sql("SELECT pg_terminate_backend(($launcher))");
ok( $node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'pg_fencing expiry launcher'"),
	'and is restarted after pg_terminate_backend');

# ---- Across restarts -------------------------------------------------------------

$gate->quit;
$node->restart;
is( sql("SELECT grants, stale_rejections FROM fencing_lock_stats WHERE lock_name = 'watched'")
	  . ' '
	  . sql("SELECT count(*) FROM fencing_rejections"),
	'5|2 4', 'the statistics survive a clean restart');

# Grants from a reserved range (preloaded, issue 15): the sequence is moved
# past the range before its first token leaves, so a crash -- after grants
# committed, rolled back, or still open -- never hands one out again.
my $granted = sql("SELECT max(fencing_grant()::text::bigint) FROM generate_series(1, 50)");
sql("BEGIN; SELECT fencing_grant() FROM generate_series(1, 20); ROLLBACK");
my $open_grants = $node->background_psql('postgres');
$open_grants->query_safe('BEGIN');
my $highest = $open_grants->query_safe(
	"SELECT max(fencing_grant()::text::bigint) FROM generate_series(1, 20)");
cmp_ok(sql("SELECT last_value FROM fencing_token_seq"), '>=', $highest + 900,
	'the token sequence is ahead of the grants by the reserved range');
eval { $open_grants->quit };

# A backend killed: the postmaster restarts the server after a crash.
my $victim = $node->background_psql('postgres');
my $victim_pid = $victim->query_safe('SELECT pg_backend_pid()');
kill 'KILL', $victim_pid;
eval { $victim->quit };
$node->poll_query_until('postgres', 'SELECT true')
  or die 'the server did not come back after the crash';
is( sql("SELECT grants, stale_rejections FROM fencing_lock_stats WHERE lock_name = 'watched'")
	  . ' '
	  . sql("SELECT count(*) FROM fencing_rejections"),
	'0|0 0', 'and are gone after a crash, as PostgreSQL\'s own');

cmp_ok(sql("SELECT fencing_grant()::text::bigint"), '>', $highest,
	'after the crash, the next grant is above every token handed out before it');
cmp_ok($highest, '>', $granted, '(which were granted in order)');
sql("SELECT fencing_acquire('quiet', 'after-crash', '1 minute')");
sql("SELECT fencing_release('quiet', token) FROM fencing_leases WHERE lock_name = 'quiet'");
cmp_ok(sql("SELECT releases FROM fencing_lock_stats WHERE lock_name = 'quiet'"),
	'>=', 1, 'counting goes on after the crash');
sql('SELECT fencing_stats_reset()');
is(sql("SELECT sum(grants + releases) FROM fencing_lock_stats"),
	'0', 'fencing_stats_reset() empties them');

$node->stop;
done_testing();
