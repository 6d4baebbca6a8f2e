# Leases under concurrency, with real concurrent sessions:
#  - many callers race for a free lock (new, or expired): exactly one wins;
#  - acquirers that wait are served in arrival order, and a caller that does
#    not wait never takes the lock from a queued waiter;
#  - a waiter that times out leaves the queue.

use strict;
use warnings;

use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('leases');
$node->init;
$node->append_conf('postgresql.conf', 'max_connections = 40');
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION pg_fencing');

# Starts psql on $script as application $name, in the background; returns
# a handle for finish_psql.  (The script goes through a file: IPC::Run only
# feeds stdin while the caller pumps.)
sub start_psql
{
	my ($name, $script) = @_;
	my $file = "$PostgreSQL::Test::Utils::tmp_check/$name.sql";
	append_to_file($file, $script);
	my ($out, $err) = ('', '');
	my $h = IPC::Run::start(
		[
			'psql', '-XAtq', '-v', 'ON_ERROR_STOP=1', '-f', $file, '-d',
			$node->connstr('postgres') . " application_name=$name"
		],
		'<', \undef, '>', \$out, '2>', \$err);
	return { name => $name, h => $h, out => \$out, err => \$err };
}

# Waits for the psql started by start_psql; returns its output lines.
sub finish_psql
{
	my ($p) = @_;
	$p->{h}->finish;
	is($? >> 8, 0, "$p->{name} exited cleanly") or diag ${ $p->{err} };
	return split /\n/, ${ $p->{out} };
}

# Waits until $count sessions wait for an advisory lock.
sub wait_for_advisory_waiters
{
	my ($count) = @_;
	$node->poll_query_until('postgres',
		"SELECT count(*) = $count FROM pg_locks WHERE locktype = 'advisory' AND NOT granted")
	  or die "timed out waiting for $count advisory lock waiters";
	return;
}

###############################################################################
# Races: 16 sessions call fencing_acquire at the same moment.  They block on
# an advisory lock held by this script (the starting gate), which is then
# released at once.
###############################################################################

my $racers = 16;
my $gate = $node->background_psql('postgres');

for my $round (1 .. 6)
{
	# Even rounds race for a lock whose row exists but whose lease expired.
	my $lock = "race-$round";
	unlink glob("$PostgreSQL::Test::Utils::tmp_check/racer-*.sql");
	if ($round % 2 == 0)
	{
		$node->safe_psql('postgres',
			"SELECT fencing_acquire('$lock', 'early', '1 millisecond'); SELECT pg_sleep(0.01)");
	}

	$gate->query_safe('SELECT pg_advisory_lock(4242)');
	my @racers = map {
		start_psql("racer-$_",
			"SELECT pg_advisory_lock_shared(4242);\n"
			  . "SELECT coalesce(fencing_acquire('$lock', 'racer-$_', '1 minute')::text, 'busy');\n")
	} 1 .. $racers;
	wait_for_advisory_waiters($racers);
	$gate->query_safe('SELECT pg_advisory_unlock(4242)');

	my @results = map { (finish_psql($_))[-1] } @racers;
	my @winners = grep { $_ ne 'busy' } @results;
	is(scalar(@winners), 1,
		"round $round ("
		  . ($round % 2 ? 'new lock' : 'expired lease')
		  . "): exactly one of $racers racers won (got @results)");
	is( $node->safe_psql('postgres',
			"SELECT token FROM fencing_leases WHERE lock_name = '$lock' AND live"),
		$winners[0],
		"round $round: the lease holds the winner's token");
}
$gate->quit;

###############################################################################
# Fairness: a holder, four waiters queued in order, and a newcomer that keeps
# trying without waiting while they are served.
###############################################################################

my $holder_token =
  $node->safe_psql('postgres', "SELECT fencing_acquire('fifo', 'holder', '1 minute')");

# Each waiter waits, holds the lock for 200 ms, and releases it.
my @waiters;
for my $i (1 .. 4)
{
	push @waiters, start_psql("waiter-$i", <<"SQL");
SELECT fencing_acquire('fifo', 'waiter-$i', '1 minute', '1 minute') AS token \\gset
SELECT :'token';
SELECT pg_sleep(0.2);
SELECT fencing_release('fifo', :'token');
SQL
	# The first waiter is first in line and polls; the others queue behind
	# it on the waiting room's advisory lock, in this order.
	if ($i == 1)
	{
		$node->poll_query_until('postgres',
			"SELECT count(*) = 1 FROM pg_stat_activity WHERE application_name = 'waiter-1' AND query LIKE '%fencing_acquire%'"
		) or die 'waiter-1 did not start';
	}
	else
	{
		wait_for_advisory_waiters($i - 1);
	}
}

# The newcomer tries every 15 ms for about 0.5 s, while the four waiters
# need at least 0.8 s to be served.
my $newcomer_script = join '',
  map { "SELECT fencing_acquire('fifo', 'newcomer', '1 minute') IS NOT NULL;\nSELECT pg_sleep(0.015);\n" }
  1 .. 30;
is($node->safe_psql('postgres', "SELECT fencing_release('fifo', '$holder_token')"),
	't', 'holder released');
my $newcomer = start_psql('newcomer', $newcomer_script);

my @tokens;
for my $w (@waiters)
{
	my @lines = finish_psql($w);
	is($lines[-1], 't', "$w->{name} released its own lease");
	push @tokens, $lines[0];
}
my @newcomer_wins = grep { $_ eq 't' } finish_psql($newcomer);

my $in_order = 1;
for my $i (0 .. $#tokens)
{
	$in_order = 0 unless $tokens[$i] =~ /^\d+$/;
	$in_order = 0 if $i > 0 && $tokens[$i] <= $tokens[ $i - 1 ];
}
ok($in_order && $tokens[0] > $holder_token,
	"waiters were served in arrival order (holder $holder_token, waiters @tokens)");
is(scalar(@newcomer_wins), 0, 'a caller that does not wait never jumped the queue');

###############################################################################
# A waiter whose wait runs out gets NULL and leaves nothing behind.
###############################################################################

$node->safe_psql('postgres', "SELECT fencing_acquire('timeout', 'holder', '1 minute')");
my $first = start_psql('timeout-1',
	"SELECT coalesce(fencing_acquire('timeout', 'w1', '1 minute', '300 ms')::text, 'timed out');\n");
$node->poll_query_until('postgres',
	"SELECT count(*) = 1 FROM pg_stat_activity WHERE application_name = 'timeout-1' AND query LIKE '%fencing_acquire%'"
) or die 'timeout-1 did not start';
my $second = start_psql('timeout-2',
	"SELECT coalesce(fencing_acquire('timeout', 'w2', '1 minute', '100 ms')::text, 'timed out');\n");
is((finish_psql($second))[-1], 'timed out', 'a queued waiter times out');
is((finish_psql($first))[-1], 'timed out', 'the polling waiter times out');
is( $node->safe_psql('postgres',
		"SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"),
	'0',
	'no advisory lock is left behind');

$node->stop;
done_testing();
