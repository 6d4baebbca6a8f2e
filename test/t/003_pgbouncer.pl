# Leases through a real PgBouncer in transaction pooling mode.
#
# A lease is a row, not a session lock: it does not belong to the server
# connection that took it, so it works when the pooler hands each
# transaction a different server connection and survives the pooler
# recycling them.  A session advisory lock, for contrast, does not.

use strict;
use warnings;

use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

my $pgbouncer = '/usr/sbin/pgbouncer';
plan skip_all => "PgBouncer is not installed ($pgbouncer)" unless -x $pgbouncer;

my $node = PostgreSQL::Test::Cluster->new('pooled');
$node->init;
# A waiter that is not woken by the release sleeps until its deadline (the
# wake-up, not a recheck, must hand over the lock through the pooler).
$node->append_conf('postgresql.conf', "pg_fencing.wait_recheck = '1h'");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION pg_fencing');

# PgBouncer on loopback, port of its own, transaction pooling, two server
# connections for everyone.
my $user = $ENV{USER} // getpwuid($<);
my $bouncer_port = PostgreSQL::Test::Cluster::get_free_port();
my $dir = $PostgreSQL::Test::Utils::tmp_check;
my $server_host = $node->host;
my $server_port = $node->port;
append_to_file("$dir/pgbouncer.ini", <<"INI");
[databases]
app = host=$server_host port=$server_port dbname=postgres user=$user

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $bouncer_port
unix_socket_dir =
auth_type = any
pool_mode = transaction
default_pool_size = 2
max_client_conn = 20
server_check_delay = 0
logfile = $dir/pgbouncer.log
pidfile = $dir/pgbouncer.pid
INI
my ($bouncer_out, $bouncer_err) = ('', '');
my $bouncer = IPC::Run::start([ $pgbouncer, "$dir/pgbouncer.ini" ],
	'<', \undef, '>', \$bouncer_out, '2>', \$bouncer_err);

my $pooled = "host=127.0.0.1 port=$bouncer_port dbname=app user=$user";

# One statement through the pooler, on a new client connection.
sub via_bouncer
{
	my ($sql) = @_;
	my ($ret, $out, $err) = $node->psql('postgres', $sql, connstr => $pooled);
	die "via PgBouncer: $sql: $err" if $ret != 0;
	return $out;
}

# Wait until PgBouncer accepts connections.
my $ready = 0;
for (1 .. 100)
{
	my ($ret) = $node->psql('postgres', 'SELECT 1', connstr => $pooled);
	if ($ret == 0) { $ready = 1; last }
	select(undef, undef, undef, 0.1);
}
ok($ready, 'PgBouncer accepts connections') or BAIL_OUT("PgBouncer: $bouncer_err");

# Every server connection PgBouncer holds, terminated: what a pool does when
# it recycles connections (server_lifetime, server_idle_timeout, RECONNECT)
# or when the server drops them.
sub recycle_server_connections
{
	$node->safe_psql('postgres',
		"SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
		  . "WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()");
	return;
}

###############################################################################
# A lease taken through the pooler outlives the server connection that took it.
###############################################################################

my $token = via_bouncer("SELECT fencing_acquire('pooled-job', 'worker-a', '1 minute')");
like($token, qr/^\d+$/, 'acquired through PgBouncer');
# A session advisory lock taken the same way, for contrast.
via_bouncer('SELECT pg_advisory_lock(77)');

recycle_server_connections();

is($node->safe_psql('postgres', "SELECT fencing_leader('pooled-job')"),
	'worker-a', 'the lease is still held after its server connection was recycled');
is($node->safe_psql('postgres',
		"SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = 77"),
	'0', 'while a session advisory lock taken through the pooler is gone');

# Renew and release are judged by token and role, not by connection: any
# client connection of the pool can do them.
is(via_bouncer("SELECT fencing_acquire('pooled-job', 'worker-b', '1 minute') IS NULL"),
	't', 'another holder is refused through the pooler');
is(via_bouncer("SELECT fencing_renew('pooled-job', '$token', '1 minute')"),
	't', 'renewed through another pooled connection');
is(via_bouncer("SELECT fencing_release('pooled-job', '$token')"),
	't', 'released through another pooled connection');
is($node->safe_psql('postgres', "SELECT fencing_leader('pooled-job') IS NULL"),
	't', 'the lock is free after the release');

###############################################################################
# Waiting through the pooler: the wait is one transaction, so it keeps its
# server connection for the wait and nothing leaks into the next client.
###############################################################################

my $held = via_bouncer("SELECT fencing_acquire('pooled-wait', 'holder', '1 minute')");
my ($wait_out, $wait_err) = ('', '');
my $waiter = IPC::Run::start(
	[
		'psql', '-XAtq', '-d', $pooled, '-c',
		"SELECT fencing_acquire('pooled-wait', 'waiter', '1 minute', '120 s')"
	],
	'<', \undef, '>', \$wait_out, '2>', \$wait_err);
$node->poll_query_until('postgres',
	"SELECT count(*) = 1 FROM pg_stat_activity WHERE query LIKE '%''waiter''%' AND pid <> pg_backend_pid() "
	  . "AND wait_event_type = 'Extension'"
) or die 'the waiter did not start sleeping on its latch';
my $released = time;
is(via_bouncer("SELECT fencing_release('pooled-wait', '$held')"),
	't', 'holder released through the pooler while a waiter occupies a server connection');
$waiter->finish;
chomp $wait_out;
cmp_ok($wait_out, '>', $held, 'the waiter got the lock with a newer token')
  or diag $wait_err;
my $took = time - $released;
# Without the wake-up it would sleep until its deadline or a spurious wake-up
# of its latch (the statistics flush timer fires 10 s after the pooled
# server connection went idle); the wake-up takes about a millisecond.
cmp_ok($took, '<', 5, 'woken by the release through the pooler')
  or diag "handed over after $took s";
is($node->safe_psql('postgres',
		"SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"),
	'0', 'no advisory lock is left on the pooled server connections');

###############################################################################
# CALL fencing_await through the pooler: one statement, so PgBouncer keeps
# its server connection until the CALL returns, though the procedure
# commits inside; it sleeps with no snapshot, is woken by the release, and
# leaves no session lock (its place in the waiting room) on the connection
# that goes back to the pool.
###############################################################################

my $held2 = via_bouncer("SELECT fencing_acquire('pooled-await', 'holder', '1 minute')");
my ($await_out, $await_err) = ('', '');
my $awaiter = IPC::Run::start(
	[
		'psql', '-XAtq', '-d', $pooled, '-c',
		"CALL fencing_await('pooled-await', 'awaiter', '1 minute', '120 s')"
	],
	'<', \undef, '>', \$await_out, '2>', \$await_err);
$node->poll_query_until('postgres',
	"SELECT count(*) = 1 FROM pg_stat_activity WHERE query LIKE 'CALL fencing_await%' "
	  . "AND wait_event_type = 'Extension' AND backend_xmin IS NULL AND backend_xid IS NULL"
) or die 'the awaiter did not start sleeping without a snapshot';
$released = time;
is(via_bouncer("SELECT fencing_release('pooled-await', '$held2')"),
	't', 'released through the pooler while fencing_await occupies a server connection');
$awaiter->finish;
chomp $await_out;
cmp_ok($await_out, '>', $held2, 'fencing_await got the lock through the pooler')
  or diag $await_err;
$took = time - $released;
cmp_ok($took, '<', 5, 'fencing_await was woken by the release through the pooler')
  or diag "handed over after $took s";
is($node->safe_psql('postgres',
		"SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"),
	'0', 'fencing_await leaves no advisory lock on the pooled server connections');

###############################################################################
# The guard through the pooler.
###############################################################################

via_bouncer(
	"CREATE TABLE resource (id int PRIMARY KEY, token fencing_token, val text); "
	  . "INSERT INTO resource VALUES (1, NULL, 'initial'); SELECT fencing_protect('resource')");
via_bouncer("UPDATE resource SET token = '$wait_out', val = 'new holder' WHERE id = 1");
my ($ret, $out, $err) = $node->psql('postgres',
	"UPDATE resource SET token = '$held', val = 'stale holder' WHERE id = 1",
	connstr => $pooled);
like($err, qr/stale fencing token $held for table "resource"/,
	'a stale write through the pooler is rejected');
is(via_bouncer('SELECT val FROM resource WHERE id = 1'),
	'new holder', "the new holder's write survives");

$bouncer->signal('INT');
$bouncer->finish;
$node->stop;
done_testing();
