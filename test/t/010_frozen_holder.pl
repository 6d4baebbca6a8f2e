# A holder frozen in the middle of a transaction never keeps the next
# holder waiting (issue 24).  Holder A takes a 1 s lease, opens a
# transaction, writes under its token, and freezes: its session sits idle
# in the transaction (one case freezes the client itself with SIGSTOP).
# Once A's lease has run out, B takes the lock and writes the row A wrote.
# Without 1.6, B's grant waits for the fence gate A's transaction holds
# (lock-wide fences, semaphores, shared locks), or B's write waits for A's
# row lock (per-row fences), for as long as A stays frozen -- 30 s here --
# and A's write lands when A wakes up.  From 1.6, with the library
# preloaded, A's transaction is ended at its lease's end (cancelled, then
# terminated because it is idle), so:
#
#   - B's grant and B's write complete under a statement_timeout of 3 s
#     (the bound is 1 s plus B's round trips; 3 s leaves room for a loaded
#     machine, and is a tenth of A's freeze);
#   - A's backend is gone, and the server log says which lease ended it;
#   - A's write is not in the table.
#
# For every fence kind: a lock-wide fence, a per-row fence, a semaphore's
# permit, a shared lease.  Then: a holder whose statement is still running
# when its lease ends is cancelled, and its session lives on (its COMMIT
# is a ROLLBACK); and a live holder that renews its lease from another
# connection, as the clients do, keeps its long transaction, which commits.
# (The refusal of a COMMIT after the lease ended, preloaded or not, is in
# sql/lease_writers.sql and test/isolation/specs/lease_writers.spec.)

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

my $node = PostgreSQL::Test::Cluster->new('frozen');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'pg_fencing'");
$node->start;
$node->safe_psql(
	'postgres', q{
CREATE EXTENSION pg_fencing;
CREATE TABLE lockwide (id int PRIMARY KEY, v text, tok fencing_token);
CREATE TABLE perrow (id int PRIMARY KEY, v text, tok fencing_token);
CREATE TABLE pooled (id int PRIMARY KEY, v text, tok fencing_token);
CREATE TABLE readers (id int PRIMARY KEY, v text, tok fencing_token);
INSERT INTO lockwide VALUES (1, 'initial', NULL);
INSERT INTO perrow VALUES (1, 'initial', NULL);
INSERT INTO pooled VALUES (1, 'initial', NULL);
INSERT INTO readers VALUES (1, 'initial', NULL);
SELECT fencing_protect('lockwide', lock_name => 'lw');
SELECT fencing_protect('perrow');
SELECT fencing_protect('pooled', lock_name => 'sem');
SELECT fencing_protect('readers', lock_name => 'sh');
});

my $freeze = 30;    # seconds A would stay frozen
my $bound = 3;      # B's statement_timeout, in seconds (see above)

# Waits until the lease under $token has run out by the server's clock
# (the same host's: its expires_at, read from the server, against ours).
sub wait_for_the_end
{
	my ($token) = @_;
	my $end = $node->safe_psql('postgres',
		"SELECT extract(epoch FROM expires_at) FROM fencing_leases WHERE token = '$token'
		 UNION ALL SELECT extract(epoch FROM expires_at) FROM fencing_permits WHERE token = '$token'");
	my $left = $end + 0.02 - time;
	usleep($left * 1e6) if $left > 0;
}

# Runs B's statements under the bound; returns (whether they completed,
# seconds taken, output).
sub as_b
{
	my ($sql) = @_;
	my $start = time;
	my ($ret, $out, $err) = $node->psql('postgres',
		"SET statement_timeout = '${bound}s';\n$sql",
		on_error_stop => 1);
	return ($ret == 0, time - $start, $out, $err);
}

sub backend_gone
{
	my ($pid) = @_;
	return $node->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = $pid");
}

# Each case: how A takes its lease, A's write (with :tok), B's takeover and
# B's write (with :tok, B's token), and the table.
my @cases = (
	{
		name => 'lock-wide fence',
		lock => 'lw',
		a_acquire => "SELECT fencing_acquire('lw', 'A', '1 s')",
		a_write => "UPDATE lockwide SET v = 'by A', tok = :tok WHERE id = 1",
		b_acquire => "SELECT fencing_acquire('lw', 'B', '1 min')",
		b_write => "UPDATE lockwide SET v = 'by B', tok = :tok WHERE id = 1",
		table => 'lockwide',
	},
	{
		name => 'per-row fence',
		lock => 'pr',
		a_acquire => "SELECT fencing_acquire('pr', 'A', '1 s')",
		a_write => "UPDATE perrow SET v = 'by A', tok = :tok WHERE id = 1",
		b_acquire => "SELECT fencing_acquire('pr', 'B', '1 min')",
		b_write => "UPDATE perrow SET v = 'by B', tok = :tok WHERE id = 1",
		table => 'perrow',
		sigstop => 1,
	},
	{
		name => 'semaphore permit',
		lock => 'sem',
		a_acquire => "SELECT fencing_acquire_permit('sem', 'A', 1, '1 s')",
		a_write => "UPDATE pooled SET v = 'by A', tok = :tok WHERE id = 1",
		b_acquire => "SELECT fencing_acquire_permit('sem', 'B', 1, '1 min')",
		b_write => "UPDATE pooled SET v = 'by B', tok = :tok WHERE id = 1",
		table => 'pooled',
	},
	{
		name => 'shared lease',
		lock => 'sh',
		a_acquire => "SELECT fencing_acquire_shared('sh', 'A', '1 s')",
		a_write => "UPDATE readers SET v = 'by A', tok = :tok WHERE id = 1",
		b_acquire => "SELECT fencing_acquire('sh', 'B', '1 min')",
		b_write => "UPDATE readers SET v = 'by B', tok = :tok WHERE id = 1",
		table => 'readers',
	},);

for my $case (@cases)
{
	my $name = $case->{name};
	my $log_offset = -s $node->logfile;
	my $a_token = $node->safe_psql('postgres', $case->{a_acquire});
	like($a_token, qr/^\d+$/, "$name: A has its lease");

	my $a = $node->background_psql('postgres');
	my $a_pid = $a->query_safe('SELECT pg_backend_pid()');
	$a->query_safe('BEGIN');
	(my $a_write = $case->{a_write}) =~ s/:tok/$a_token/;
	$a->query_safe($a_write);
	# A freezes: its session stays idle in the transaction; in one case the
	# client process itself is stopped.
	my $client_pid = $a->{run}->{KIDS}[0]{PID};
	kill 'STOP', $client_pid if $case->{sigstop};

	wait_for_the_end($a_token);
	my ($granted, $grant_s, $b_token, $grant_err) = as_b($case->{b_acquire});
	ok($granted && $b_token =~ /^\d+$/,
		"$name: B's grant answers within ${bound} s of A's lease end (took "
		  . sprintf('%.3f', $grant_s) . " s) $grant_err");
	$b_token = 0 unless $b_token =~ /^\d+$/;
	(my $b_write = $case->{b_write}) =~ s/:tok/$b_token/;
	my ($wrote, $write_s, undef, $write_err) = as_b($b_write);
	ok($wrote, "$name: B's write of the row A locked lands within ${bound} s (took "
		  . sprintf('%.3f', $write_s) . " s) $write_err");
	note sprintf('%s: takeover %.3f s, write %.3f s', $name, $grant_s, $write_s);

	ok(backend_gone($a_pid), "$name: A's session, idle in its transaction, was terminated");
	like(
		slurp_file($node->logfile, $log_offset),
		qr/terminating process $a_pid, idle in a transaction that wrote under the lease (of fencing lock "$case->{lock}" under token $a_token, which ran out|under token $a_token, whose lock has been granted again)/,
		"$name: the server log names the lease that ended A's transaction");
	is($node->safe_psql('postgres', "SELECT v FROM $case->{table} WHERE id = 1"),
		'by B', "$name: A's write is not in the table, B's is");

	# A wakes up: its COMMIT finds its connection gone.
	kill 'CONT', $client_pid if $case->{sigstop};
	my ($ok) = eval { $a->query('COMMIT'); 1 };
	eval { $a->quit };
	is($node->safe_psql('postgres', "SELECT v FROM $case->{table} WHERE id = 1"),
		'by B', "$name: A's COMMIT after waking changes nothing");
}

###############################################################################
# A statement still running when the lease ends: cancelled, and the session
# lives on.
###############################################################################
{
	my $a_token = $node->safe_psql('postgres', "SELECT fencing_acquire('run', 'A', '1 s')");
	$node->safe_psql('postgres',
		"CREATE TABLE running (id int PRIMARY KEY, v text, tok fencing_token);
		 INSERT INTO running VALUES (1, 'initial', NULL);
		 SELECT fencing_protect('running', lock_name => 'run')");
	my $a = $node->background_psql('postgres', on_error_stop => 0);
	my $a_pid = $a->query_safe('SELECT pg_backend_pid()');
	$a->query_safe('BEGIN');
	$a->query_safe("UPDATE running SET v = 'by A', tok = $a_token WHERE id = 1");
	my $start = time;
	my ($out, $ret) = $a->query("SELECT pg_sleep($freeze)");
	my $ran = time - $start;
	ok($ran < $freeze / 2,
		'a running statement is cancelled when its lease ends (ran ' . sprintf('%.1f', $ran) . ' s)');
	like($a->{stderr}, qr/canceling statement due to user request/, 'it was a cancel');
	$a->{stderr} = '';
	# Its COMMIT ends the aborted transaction (PostgreSQL answers ROLLBACK).
	$a->query_safe('COMMIT');
	is($a->query_safe('SELECT pg_backend_pid()'), $a_pid, 'the session lives on');
	$a->quit;
	is($node->safe_psql('postgres', 'SELECT v FROM running'), 'initial', "A's write was rolled back");
	wait_for_the_end($a_token);
	my ($granted) = as_b("SELECT fencing_acquire('run', 'B', '1 min')");
	ok($granted, 'B takes the lock');
}

###############################################################################
# A lease released early ends its writer at once, not at its old end: the
# release's commit asks the expiry worker to look, because a transaction
# writes under that lease.  The lease had an hour left, and the worker's
# periodic look is a minute away: the bound here is 20 s.
###############################################################################
{
	$node->safe_psql('postgres',
		"CREATE TABLE released (id int PRIMARY KEY, v text, tok fencing_token);
		 INSERT INTO released VALUES (1, 'initial', NULL);
		 SELECT fencing_protect('released', lock_name => 'rel')");
	my $log_offset = -s $node->logfile;
	my $a_token = $node->safe_psql('postgres', "SELECT fencing_acquire('rel', 'A', '1 hour')");
	my $a = $node->background_psql('postgres');
	my $a_pid = $a->query_safe('SELECT pg_backend_pid()');
	$a->query_safe('BEGIN');
	$a->query_safe("UPDATE released SET v = 'by A', tok = $a_token WHERE id = 1");
	is($node->safe_psql('postgres', "SELECT fencing_release('rel', '$a_token')"),
		't', 'the lease is released from another connection while A writes under it');
	my $gone = 0;
	my $until = time + 20;
	while (time < $until)
	{
		$gone = $node->safe_psql('postgres',
			"SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = $a_pid") eq 't';
		last if $gone;
		usleep(100_000);
	}
	ok($gone, "A's session, idle in its transaction under the released lease, ended within 20 s");
	like(
		slurp_file($node->logfile, $log_offset),
		qr/terminating process $a_pid, idle in a transaction that wrote under the lease of fencing lock "rel" under token $a_token, which was ended/,
		'the server log names the released lease');
	eval { $a->quit };
	is($node->safe_psql('postgres', 'SELECT v FROM released WHERE id = 1'),
		'initial', "A's write is not in the table");
}

###############################################################################
# A release nobody writes under asks for no look: each look is a process
# the postmaster starts, and a fleet releases all the time.  Twenty
# releases, 100 ms apart, with the postmaster saying when it starts a
# worker (DEBUG1); a few may start for other reasons (the leases above,
# the periodic look), one per release did before.
###############################################################################
{
	$node->safe_psql('postgres',
		"ALTER SYSTEM SET log_min_messages = debug1; SELECT pg_reload_conf()");
	usleep(500_000);
	my $log_offset = -s $node->logfile;
	$node->safe_psql('postgres',
		join("\n",
			map { "SELECT fencing_release('quiet', fencing_acquire('quiet', 'q$_', '1 hour')); SELECT pg_sleep(0.1);" }
			  1 .. 20));
	usleep(500_000);
	$node->safe_psql('postgres', "ALTER SYSTEM RESET log_min_messages; SELECT pg_reload_conf()");
	my $log = slurp_file($node->logfile, $log_offset);
	my $started = () = $log =~ /starting background worker process "pg_fencing expiry worker/g;
	ok($started < 5, "twenty releases with no writer started $started expiry workers (fewer than 5)");
}

###############################################################################
# A live holder renews from another connection: its long transaction is
# not ended, and commits.
###############################################################################
{
	my $a_token = $node->safe_psql('postgres', "SELECT fencing_acquire('lw', 'keeper', '1 s')");
	# lw is B's from above, for a minute: take it back.
	if ($a_token eq '')
	{
		$node->safe_psql('postgres', "SELECT fencing_revoke('lw')");
		$a_token = $node->safe_psql('postgres', "SELECT fencing_acquire('lw', 'keeper', '1 s')");
	}
	like($a_token, qr/^\d+$/, 'the keeper has its lease');
	my $renewer = $node->background_psql('postgres');
	my $a = $node->background_psql('postgres');
	$a->query_safe('BEGIN');
	$a->query_safe("UPDATE lockwide SET v = 'by the keeper', tok = $a_token WHERE id = 1");
	# Idle in its transaction for 3 s, three times the lease's length,
	# while the other connection renews every 300 ms.
	my $until = time + 3;
	my $renewals_ok = 1;
	while (time < $until)
	{
		$renewals_ok &&=
		  $renewer->query_safe("SELECT fencing_renew('lw', '$a_token', '1 s')") eq 't';
		usleep(300_000);
	}
	ok($renewals_ok, 'every renewal succeeded');
	$a->query_safe('COMMIT');
	is($node->safe_psql('postgres', 'SELECT v FROM lockwide WHERE id = 1'),
		'by the keeper', "the renewed holder's long transaction committed");
	$renewer->quit;
	$a->quit;
}

done_testing();
