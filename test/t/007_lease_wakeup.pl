# Hand-over without polling: the first waiter for a lease sleeps on its latch
# and is woken by the commit of a release, a revoke or a renew that brings
# the lease's end closer, or wakes on its own when the lock becomes
# available (the lease's end, plus a lock-delay).
#
# The server runs with pg_fencing.wait_recheck = 1h and without
# shared_preload_libraries: a waiter that is not woken sleeps until the lock
# is available, its own deadline (60 s here) or a spurious wake-up of its
# latch -- PostgreSQL sets it for its own reasons too, e.g. the timer that
# flushes a backend's statistics 10 s after it went idle.  So a hand-over
# within 5 s of the release is the wake-up's doing; the wake-up takes about
# a millisecond (bench/ measures it), and 5 s leaves room for a loaded
# machine.  Without the wake-up these checks fail.

use strict;
use warnings;

use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

my $node = PostgreSQL::Test::Cluster->new('wakeup');
$node->init;
$node->append_conf('postgresql.conf', "pg_fencing.wait_recheck = '1h'");
# Counts the waiters' attempts (pg_stat_user_functions): a waiter that is
# woken makes a few, one that polls or spins makes many.
$node->append_conf('postgresql.conf', "track_functions = 'pl'");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION pg_fencing');
is($node->safe_psql('postgres', 'SHOW shared_preload_libraries'),
	'', 'the module is not preloaded');

my $deadline = 60;    # seconds a waiter waits
my $prompt = 5;       # seconds: "handed over by the wake-up" (see above)

# Starts psql on the script $sql as application $name, in the background.
# (The script goes through a file: IPC::Run only feeds stdin while the
# caller pumps.)
sub start_psql
{
	my ($name, $sql) = @_;
	$sql .= ";\n" unless $sql =~ /\n\z/;
	my $file = "$PostgreSQL::Test::Utils::tmp_check/$name.sql";
	unlink $file;
	append_to_file($file, $sql);
	my ($out, $err) = ('', '');
	my $h = IPC::Run::start(
		[
			'psql', '-XAtq', '-v', 'ON_ERROR_STOP=1', '-f', $file, '-d',
			$node->connstr('postgres') . " application_name=$name"
		],
		'<', \undef, '>', \$out, '2>', \$err);
	return { name => $name, h => $h, out => \$out, err => \$err };
}

# Waits for it; returns (exit code, output, stderr).
sub finish_psql
{
	my ($p) = @_;
	$p->{h}->finish;
	my ($out, $err) = (${ $p->{out} }, ${ $p->{err} });
	chomp $out;
	return ($? >> 8, $out, $err);
}

# Waits until application $name sleeps in fencing_wait_for_wakeup (after
# seeing the lease busy), so that what hands it the lock comes after.
sub wait_until_asleep
{
	my ($name) = @_;
	$node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM pg_stat_activity WHERE application_name = '$name' "
		  . "AND wait_event_type = 'Extension' AND wait_event = 'Extension'")
	  or die "$name never slept on its latch";
	return;
}

my $wait_sql = sub {
	my ($lock, $holder) = @_;
	return "SELECT fencing_acquire('$lock', '$holder', '1 hour', '$deadline s')";
};

###############################################################################
# A release wakes the waiter.
###############################################################################

my $held = $node->safe_psql('postgres', "SELECT fencing_acquire('w-release', 'holder', '1 hour')");
my $waiter = start_psql('w-release-waiter', $wait_sql->('w-release', 'waiter'));
wait_until_asleep('w-release-waiter');
my $released = time;
is($node->safe_psql('postgres', "SELECT fencing_release('w-release', '$held')"),
	't', 'the holder released');
my ($rc, $out, $err) = finish_psql($waiter);
my $took = time - $released;
is($rc, 0, 'the waiter ended cleanly') or diag $err;
cmp_ok($out, '>', $held, 'the waiter got the lock with a newer token');
cmp_ok($took, '<', $prompt, 'woken by the release')
  or diag "handed over after $took s";

###############################################################################
# A renew that brings the lease's end closer wakes the waiter, which then
# sleeps until the new end and takes the lock when it comes.
###############################################################################

$held = $node->safe_psql('postgres', "SELECT fencing_acquire('w-renew', 'holder', '1 hour')");
$waiter = start_psql('w-renew-waiter', $wait_sql->('w-renew', 'waiter'));
wait_until_asleep('w-renew-waiter');
is($node->safe_psql('postgres', "SELECT fencing_renew('w-renew', '$held', '1 second')"),
	't', 'the holder renewed for one second instead of an hour');
my $renewed = time;
($rc, $out, $err) = finish_psql($waiter);
$took = time - $renewed;
is($rc, 0, 'the waiter ended cleanly') or diag $err;
cmp_ok($out, '>', $held, 'the waiter got the lock once the shortened lease ended');
cmp_ok($took, '<', $prompt, 'at the new end, not at the old one')
  or diag "handed over after $took s";

###############################################################################
# A lease that ends while someone waits is handed over at its end: the
# waiter sleeps until then, with no wake-up and no recheck.
###############################################################################

$held = $node->safe_psql('postgres', "SELECT fencing_acquire('w-expiry', 'holder', '2 seconds')");
my $ends = $node->safe_psql('postgres',
	"SELECT expires_at FROM fencing_leases WHERE lock_name = 'w-expiry'");
$waiter = start_psql('w-expiry-waiter', $wait_sql->('w-expiry', 'waiter'));
($rc, $out, $err) = finish_psql($waiter);
is($rc, 0, 'the waiter ended cleanly') or diag $err;
cmp_ok($out, '>', $held, 'the waiter took over the expired lease');
is($node->safe_psql('postgres',
		"SELECT granted_at >= '$ends' AND granted_at < '$ends'::timestamptz + interval '$prompt s' "
		  . "FROM fencing_leases WHERE lock_name = 'w-expiry'"),
	't', 'at the end of the lease: not before it, and not at the deadline');

###############################################################################
# A queue of waiters: each release wakes the next one in line, which got the
# waiting room from the lock manager when the one before it left.
###############################################################################

my $queue = 4;
$held = $node->safe_psql('postgres', "SELECT fencing_acquire('w-queue', 'holder', '1 hour')");
my @waiters;
for my $i (1 .. $queue)
{
	# Each waiter releases at once what it got, handing over to the next.
	# (in a transaction of its own: the release must wake the next waiter).
	push @waiters,
	  start_psql("w-queue-$i",
		$wait_sql->('w-queue', "waiter-$i") . " AS t \\gset\n"
		  . "SELECT fencing_release('w-queue', :'t');\n");
	$node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM pg_stat_activity WHERE application_name = 'w-queue-$i' "
		  . "AND wait_event_type IN ('Lock', 'Extension')")
	  or die "w-queue-$i did not queue";
}
wait_until_asleep('w-queue-1');
$released = time;
$node->safe_psql('postgres', "SELECT fencing_release('w-queue', '$held')");
for my $p (@waiters)
{
	($rc, $out, $err) = finish_psql($p);
	is($rc, 0, "$p->{name} ended cleanly") or diag $err;
	is($out, 't', "$p->{name} got the lock and released it");
}
$took = time - $released;
cmp_ok($took, '<', $prompt, "the lock went down a queue of $queue waiters by wake-ups")
  or diag "the queue took $took s";

###############################################################################
# A revoke wakes the waiter.
###############################################################################

$held = $node->safe_psql('postgres', "SELECT fencing_acquire('w-revoke', 'holder', '1 hour')");
$waiter = start_psql('w-revoke-waiter', $wait_sql->('w-revoke', 'waiter'));
wait_until_asleep('w-revoke-waiter');
$released = time;
$node->safe_psql('postgres', "SELECT fencing_revoke('w-revoke', 'test')");
($rc, $out, $err) = finish_psql($waiter);
$took = time - $released;
is($rc, 0, 'the waiter ended cleanly') or diag $err;
cmp_ok($out, '>', $held, 'the waiter got the revoked lock');
cmp_ok($took, '<', $prompt, 'woken by the revoke')
  or diag "handed over after $took s";

###############################################################################
# A lease that expires under a lock-delay: the waiter sleeps until the lock
# is available (the lease's end plus the delay), without spinning meanwhile.
###############################################################################

# The attempts fencing_try_acquire has made so far, in every session.
sub attempts
{
	return $node->safe_psql('postgres',
		"SELECT coalesce(sum(calls), 0) FROM pg_stat_user_functions WHERE funcname = 'fencing_try_acquire'");
}
$node->safe_psql('postgres', "SELECT fencing_create_lock('w-delay')");
$node->safe_psql('postgres', "SELECT fencing_set_lock_delay('w-delay', '3 seconds')");
$held = $node->safe_psql('postgres', "SELECT fencing_acquire('w-delay', 'holder', '1 second')");
$ends = $node->safe_psql('postgres',
	"SELECT expires_at FROM fencing_leases WHERE lock_name = 'w-delay'");
my $attempts_before = attempts();
$waiter = start_psql('w-delay-waiter', $wait_sql->('w-delay', 'waiter'));
($rc, $out, $err) = finish_psql($waiter);
is($rc, 0, 'the waiter ended cleanly') or diag $err;
cmp_ok($out, '>', $held, 'the waiter got the lock after its lock-delay');
is($node->safe_psql('postgres',
		"SELECT granted_at >= '$ends'::timestamptz + interval '3 seconds' "
		  . "AND granted_at < '$ends'::timestamptz + interval '3 seconds' + interval '$prompt s' "
		  . "FROM fencing_leases WHERE lock_name = 'w-delay'"),
	't', 'at the end of the lock-delay: not before it, and not at the deadline');
my $attempts = attempts() - $attempts_before;
cmp_ok($attempts, '<=', 20, 'the waiter slept through the lease and its delay (few attempts)')
  or diag "$attempts attempts";

###############################################################################
# Semaphores (issue 16): a waiter for a permit is woken by the release of
# any permit, and takes that slot.
###############################################################################

my @permits = map {
	$node->safe_psql('postgres', "SELECT fencing_acquire_permit('w-sem', 'holder-$_', 2, '1 hour')")
} (1, 2);
$waiter = start_psql('w-sem-waiter',
	"SELECT fencing_acquire_permit('w-sem', 'waiter', 2, '1 hour', '$deadline s')");
wait_until_asleep('w-sem-waiter');
$released = time;
$node->safe_psql('postgres', "SELECT fencing_release('w-sem', '$permits[1]')");
($rc, $out, $err) = finish_psql($waiter);
$took = time - $released;
is($rc, 0, 'the permit waiter ended cleanly') or diag $err;
cmp_ok($out, '>', $permits[1], 'the permit waiter got a newer token');
cmp_ok($took, '<', $prompt, 'woken by the release of a permit')
  or diag "handed over after $took s";
is($node->safe_psql('postgres',
		"SELECT string_agg(slot || ':' || holder, ' ' ORDER BY slot) FROM fencing_permits "
		  . "WHERE lock_name = 'w-sem' AND live"),
	'1:holder-1 2:waiter', 'in the slot that was released');

###############################################################################
# Shared leases (issue 16): writers are not starved.  An exclusive acquirer
# that waits for the shared holders to leave sits in the lock's waiting
# room, so no new shared lease is granted meanwhile; the last shared
# release wakes it.
###############################################################################

my $shared = $node->safe_psql('postgres',
	"SELECT fencing_acquire_shared('w-rw', 'reader-1', '1 hour')");
$waiter = start_psql('w-rw-writer', $wait_sql->('w-rw', 'writer'));
wait_until_asleep('w-rw-writer');
is($node->safe_psql('postgres',
		"SELECT fencing_acquire_shared('w-rw', 'reader-2', '1 hour') IS NULL"),
	't', 'no new shared lease while an exclusive acquirer waits');
$released = time;
$node->safe_psql('postgres', "SELECT fencing_release('w-rw', '$shared')");
($rc, $out, $err) = finish_psql($waiter);
$took = time - $released;
is($rc, 0, 'the exclusive waiter ended cleanly') or diag $err;
cmp_ok($out, '>', $shared, 'the exclusive waiter got the lock with a newer token');
cmp_ok($took, '<', $prompt, 'woken by the last shared release')
  or diag "handed over after $took s";
is($node->safe_psql('postgres',
		"SELECT high_water::bigint = $out FROM fencing_fences WHERE lock_name = 'w-rw'"),
	't', 'its grant raised the mark above the shared holder');

# And the other way round: a shared acquirer waits for the exclusive holder.
$waiter = start_psql('w-rw-reader',
	"SELECT fencing_acquire_shared('w-rw', 'reader-3', '1 hour', '$deadline s')");
wait_until_asleep('w-rw-reader');
$released = time;
$node->safe_psql('postgres', "SELECT fencing_release('w-rw', '$out')");
my $exclusive = $out;
($rc, $out, $err) = finish_psql($waiter);
$took = time - $released;
is($rc, 0, 'the shared waiter ended cleanly') or diag $err;
cmp_ok($out, '>', $exclusive, 'the shared waiter got a newer token');
cmp_ok($took, '<', $prompt, 'woken by the exclusive release')
  or diag "handed over after $took s";

###############################################################################
# A sleeping waiter can be cancelled.
###############################################################################

$held = $node->safe_psql('postgres', "SELECT fencing_acquire('w-cancel', 'holder', '1 hour')");
$waiter = start_psql('w-cancel-waiter', $wait_sql->('w-cancel', 'waiter'));
wait_until_asleep('w-cancel-waiter');
$node->safe_psql('postgres',
	"SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE application_name = 'w-cancel-waiter'");
($rc, $out, $err) = finish_psql($waiter);
isnt($rc, 0, 'a cancelled waiter fails');
like($err, qr/canceling statement due to user request/, 'with the cancel error');
is($node->safe_psql('postgres', "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"),
	'0', 'and leaves the waiting room');

$node->stop;
done_testing();
