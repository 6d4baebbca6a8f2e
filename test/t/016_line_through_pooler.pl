# A fleet waiting in line through a transaction-pooling PgBouncer (1.10,
# issue 43): 200 candidates in 4 client processes and a leader, all behind
# a pool of 5 server connections.  On 1.8, a candidate waiting in CALL
# fencing_await kept a server connection for its whole wait: 5 of them
# took the pool, and the leader's renewals queued behind them until its
# lease ran out.  A place in line is a row: the candidates poll and renew
# in short statements, the leader keeps its lease for 30 s, the server
# never has more client backends than the pool, and when the leader
# resigns the first place in line leads -- nobody else is ever granted.
#
# Each client is a psql whose \watch repeats one statement every 0.5 s,
# sleeping in the client between them, as a client library does.

use strict;
use warnings;

use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $pgbouncer = '/usr/sbin/pgbouncer';
plan skip_all => "PgBouncer is not installed ($pgbouncer)" unless -x $pgbouncer;

my $node = PostgreSQL::Test::Cluster->new('fleet');
$node->init;
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION pg_fencing');
$node->safe_psql('postgres',
	'CREATE TABLE candidate (n int PRIMARY KEY, session bigint, place bigint)');

my $pool_size = 5;
my $user = $ENV{USER} // getpwuid($<);
my $bouncer_port = PostgreSQL::Test::Cluster::get_free_port();
my $dir = $PostgreSQL::Test::Utils::tmp_check;
my ($server_host, $server_port) = ($node->host, $node->port);
append_to_file("$dir/pgbouncer_fleet.ini", <<"INI");
[databases]
app = host=$server_host port=$server_port dbname=postgres user=$user

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $bouncer_port
unix_socket_dir =
auth_type = any
pool_mode = transaction
default_pool_size = $pool_size
max_client_conn = 50
logfile = $dir/pgbouncer_fleet.log
pidfile = $dir/pgbouncer_fleet.pid
INI
my ($bouncer_out, $bouncer_err) = ('', '');
my $bouncer = IPC::Run::start([ $pgbouncer, "$dir/pgbouncer_fleet.ini" ],
	'<', \undef, '>', \$bouncer_out, '2>', \$bouncer_err);
my $pooled = "host=127.0.0.1 port=$bouncer_port dbname=app user=$user";

sub via_bouncer
{
	my ($sql) = @_;
	my ($ret, $out, $err) = $node->psql('postgres', $sql, connstr => $pooled);
	die "via PgBouncer: $sql: $err" if $ret != 0;
	return $out;
}

my $ready = 0;
for (1 .. 100)
{
	my ($ret) = $node->psql('postgres', 'SELECT 1', connstr => $pooled);
	if ($ret == 0) { $ready = 1; last }
	select(undef, undef, undef, 0.1);
}
ok($ready, 'PgBouncer accepts connections') or BAIL_OUT("PgBouncer: $bouncer_err");

# A psql through the pooler repeating $sql every 0.5 s until stopped.
sub watching
{
	my ($name, $sql, @vars) = @_;
	my $file = "$dir/$name.sql";
	append_to_file($file, "$sql\n\\watch 0.5\n");
	my %client = (out => '', err => '');
	$client{run} = IPC::Run::start(
		[ 'psql', '-XAtq', '-v', 'ON_ERROR_STOP=1', @vars, '-d', $pooled, '-f', $file ],
		'<', \undef, '>', \$client{out}, '2>', \$client{err});
	return \%client;
}

sub stop
{
	my ($client) = @_;
	$client->{run}->signal('INT');
	$client->{run}->finish;
	# The interrupt that ends \watch cancels the statement it may be
	# running just then: psql says so, which is no error of the client's.
	$client->{err} =~ s/^Cancel request sent\n//mg;
	return;
}

# The leader: a session of 2 s renewed every 0.5 s; first in line, it
# takes the lock at once.
my $leader = via_bouncer("SELECT fencing_session_open('leader', '2 s')");
my ($leader_place, $leader_token) =
  split /\|/, via_bouncer("SELECT place, token FROM fencing_line_join($leader, 'fleet')");
like($leader_token, qr/^\d+$/, 'the leader, first in line, takes the lock at once');
my $renewer = watching('leader',
	"SELECT 'renewed|' || fencing_session_renew($leader)");

# 200 candidates in 4 processes, started at once: each opens its 50
# sessions (3 s) and joins the line, then renews its sessions and polls its
# places in one statement every 0.5 s (\watch repeats the last one).
my @candidates;
for my $k (0 .. 3)
{
	my ($lo, $hi) = (50 * $k + 1, 50 * $k + 50);
	push @candidates, watching("candidates$k", <<"SQL");
INSERT INTO candidate
  SELECT n, s, (fencing_line_join(s, 'fleet')).place
    FROM (SELECT n, fencing_session_open('c' || n, '3 s') AS s
            FROM generate_series($lo, $hi) n) opened
  ON CONFLICT (n) DO NOTHING;
WITH renewed AS (
  SELECT count(*) FILTER (WHERE NOT fencing_session_renew(c.session)) AS lost
    FROM candidate c WHERE c.n BETWEEN $lo AND $hi)
SELECT 'lost|' || lost FROM renewed
UNION ALL
SELECT 'granted|' || p.place || '|' || p.token
  FROM fencing_line_poll(ARRAY(SELECT place FROM candidate WHERE n BETWEEN $lo AND $hi)) p
 WHERE p.state = 'granted';
SQL
}

# 30 s: the server never has more client backends than the pool (plus
# this test's own), and the leader keeps its lease.
my $most_backends = 0;
my $waiting = 0;
for (1 .. 30)
{
	sleep 1;
	my $backends = $node->safe_psql('postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()"
	);
	$most_backends = $backends if $backends > $most_backends;
	$waiting = $node->safe_psql('postgres',
		"SELECT count(*) FROM fencing_line WHERE token IS NULL");
}
cmp_ok($most_backends, '<=', $pool_size,
	"at most $pool_size server backends while 200 candidates wait");
is($waiting, '200', 'all 200 candidates wait in line');
is($node->safe_psql('postgres',
		"SELECT holder || '|' || token || '|' || state FROM fencing_leases WHERE lock_name = 'fleet'"),
	"leader|$leader_token|live", 'the leader holds its lease after 30 s');

# The leader resigns; the first place in line leads.
stop($renewer);
my @renewals = $renewer->{out} =~ /^renewed\|(\w+)$/mg;
cmp_ok(scalar(@renewals), '>=', 30, scalar(@renewals) . ' renewals of the leader in 30 s');
is(join(',', grep { $_ ne 'true' } @renewals), '', 'every renewal of the leader succeeded')
  or diag $renewer->{err};
is(via_bouncer("SELECT fencing_release('fleet', '$leader_token')"),
	't', 'the leader resigns');
my $first = $node->safe_psql('postgres',
	'SELECT n || \'|\' || place FROM candidate ORDER BY place LIMIT 1');
my ($first_n, $first_place) = split /\|/, $first;
ok( $node->poll_query_until(
		'postgres',
		"SELECT holder FROM fencing_leases WHERE lock_name = 'fleet' AND state = 'live'",
		"c$first_n"),
	"the first in line (c$first_n) leads after the resignation");

# Another round of polls, then every client stops.
sleep 2;
stop($_) for @candidates;
my %granted;
for my $client (@candidates)
{
	is($client->{err}, '', 'a candidate process ran without an error');
	my @rounds = $client->{out} =~ /^lost\|(\d+)$/mg;
	cmp_ok(scalar(@rounds), '>=', 30, scalar(@rounds) . ' rounds of renewals and polls');
	is(join(',', grep { $_ ne '0' } @rounds), '', 'no candidate lost its session');
	$granted{$1} = $2 while $client->{out} =~ /^granted\|(\d+)\|(\d+)$/mg;
}
is(join(',', sort keys %granted), $first_place,
	'only the first place was ever told it was granted');
is($node->safe_psql('postgres', "SELECT token FROM fencing_leases WHERE lock_name = 'fleet'"),
	$granted{$first_place} // '', 'and the lease it was told of is the one that lives');

###############################################################################
# A waiter of the waiting room and a place in line on one lock (direct
# connections): the room's waiter is served first, until every wait is a
# place, and the place next.  A shared lock is held by a reader; a CALL
# fencing_await for its exclusive lease sleeps in the lock's waiting room;
# a place joins the line.  When the reader releases, the CALL has the lock
# and the place waits; when the CALL's holder releases, the place's poll
# takes it.  Neither keeps the lock from the other.
###############################################################################
my $reader = $node->safe_psql('postgres', "SELECT fencing_acquire_shared('mixed', 'reader', '1 minute')");
my ($await_out, $await_err) = ('', '');
my $awaiter = IPC::Run::start(
	[
		'psql', '-XAtq', '-d', $node->connstr('postgres'), '-c',
		"CALL fencing_await('mixed', 'awaiter', '1 minute', '60 s')"
	],
	'<', \undef, '>', \$await_out, '2>', \$await_err);
$node->poll_query_until('postgres',
	"SELECT count(*) = 1 FROM pg_stat_activity WHERE query LIKE 'CALL fencing_await%' "
	  . "AND wait_event_type = 'Extension'")
  or die 'the CALL did not start sleeping in the waiting room';
my $mixed_session = $node->safe_psql('postgres', "SELECT fencing_session_open('in-line', '1 minute')");
my $mixed_place = $node->safe_psql('postgres',
	"SELECT place FROM fencing_line_join($mixed_session, 'mixed')");
is($node->safe_psql('postgres', "SELECT fencing_release('mixed', '$reader')"),
	't', 'the reader releases the shared lock');
$awaiter->finish;
chomp $await_out;
like($await_out, qr/^\d+$/, 'the waiting room\'s CALL has the lock first') or diag $await_err;
is( $node->safe_psql('postgres',
		"SELECT state FROM fencing_line_poll(ARRAY[$mixed_place])"),
	'waiting',
	'the place waits while the CALL holds the lock');
is($node->safe_psql('postgres', "SELECT fencing_release('mixed', '$await_out')"),
	't', 'the CALL\'s lease is released');
is( $node->safe_psql('postgres',
		"SELECT state FROM fencing_line_poll(ARRAY[$mixed_place])"),
	'granted',
	'then the place takes the lock');

$bouncer->signal('INT');
$bouncer->finish;
$node->stop;
done_testing();
