# A lease grant, and a lock's mark raised by a write, must survive a crash
# even when the session committed them with synchronous_commit = off
# (issue 10, item 12).
#
# The hazard: holder A acquires the lock (token a) and writes under a
# lock-wide fence, so the mark is a.  A's lease ends; B acquires the lock in
# a session with synchronous_commit = off and gets token b.  fencing_grant()
# flushes the WAL that made b durable, but the lease row and the mark raise
# to b are in the same asynchronously committed transaction, whose commit
# record has not reached disk when the server crashes.  After crash
# recovery, the token sequence is above b, but the lease is A's again and
# the mark is back at a: A's older token is accepted again.  The same goes
# for a mark raised only by a guarded write with a higher token.
#
# The fix: fencing_try_acquire, fencing_renew and fencing_release call
# fencing_commit_durably(), and the guard calls RequireDurableCommit() when
# it raises a lock's mark; both force a synchronous local commit
# (src/backend/durable_commit.cpp).
#
# The crashes are kill -9 of every server process, with the processes that
# could write the WAL out on their own (WAL writer, background writer,
# checkpointer) frozen with SIGSTOP beforehand, as in 001_grant_durability.pl,
# whose helpers and reasoning this file repeats.  Cluster.pm runs with
# fsync = off, so "written" and "flushed" are the same here: a WAL record
# survives a kill -9 exactly when something wrote it out of the WAL buffers.
# A control round shows that this set-up does lose an ordinary
# asynchronously committed transaction.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

plan skip_all => 'crash simulation needs POSIX signals' if $windows_os;

my $node = PostgreSQL::Test::Cluster->new('async_durability');
$node->init;

# Nothing but our own backend may write the WAL out between B's commit and
# the crash (see 001_grant_durability.pl for each setting):
# - wal_writer_delay = 10s, its maximum: the WAL writer writes out
#   asynchronous commits on its next cycle.  It still wakes early when a
#   commit completes a WAL page, so the rounds also freeze it (SIGSTOP);
#   the setting is the fallback.  wal_writer_flush_after stays at its
#   default: 0 would make every cycle flush, not fewer, and the freeze
#   makes the question moot.
# - checkpoint_timeout = 1h: a checkpoint flushes the WAL.
# - bgwriter_lru_maxpages = 0: writing a dirty page out first flushes the
#   WAL up to its LSN.
# - autovacuum = off: no other transactions committing (and flushing).
$node->append_conf(
	'postgresql.conf', q{
wal_writer_delay = 10s
checkpoint_timeout = 1h
bgwriter_lru_maxpages = 0
autovacuum = off
});
$node->start;
$node->safe_psql(
	'postgres', q{
CREATE EXTENSION pg_fencing;
-- Acquire rounds: a table under lock 'job'.
CREATE TABLE job_state (id int PRIMARY KEY, token fencing_token, val text);
SELECT fencing_protect('job_state', lock_name => 'job');
INSERT INTO job_state VALUES (1, fencing_grant(), 'initial');
-- Write rounds: a table under lock 'ledger', written with bare tokens.
CREATE TABLE ledger (id int PRIMARY KEY, token fencing_token, val text);
SELECT fencing_protect('ledger', lock_name => 'ledger');
INSERT INTO ledger VALUES (1, fencing_grant(), 'initial'), (2, fencing_grant(), 'initial');
-- Control round: no guard at all.
CREATE TABLE plain (id int PRIMARY KEY, val text);
INSERT INTO plain VALUES (1, 'initial');
});

###############################################################################
# Crash helpers (as in 001_grant_durability.pl)
###############################################################################

# The server processes other than the postmaster, from pg_stat_activity
# (which lists the auxiliary processes too, and the querying backend).
sub server_pids
{
	my ($session, $where) = @_;
	$where //= 'true';
	my $out =
	  $session->query_safe("SELECT pid FROM pg_stat_activity WHERE $where");
	return grep { /^\d+$/ } split /\n/, $out;
}

# Stops every process that could write the WAL out behind our back.  They
# stay stopped until the crash kills them.
sub freeze_wal_writers
{
	my ($session) = @_;
	my @pids = server_pids($session,
		"backend_type IN ('walwriter', 'background writer', 'checkpointer')"
	);
	is(scalar(@pids), 3,
		'found the WAL writer, background writer and checkpointer');
	kill 'STOP', @pids;
	return;
}

# Whether a process exists and is not a zombie.
sub pid_running
{
	my ($pid) = @_;
	if (open my $fh, '<', "/proc/$pid/stat")
	{
		my $stat = <$fh>;
		close $fh;
		return 0 unless defined $stat;
		my ($state) = $stat =~ /\)\s+(\S)/;
		return defined($state) && $state ne 'Z' && $state ne 'X';
	}
	return kill(0, $pid) ? 1 : 0;
}

# SIGKILL the postmaster and at once every other server process, wait until
# they are all gone, and start again (crash recovery).
sub crash_and_restart
{
	my (@children) = @_;
	my $pgdata = $node->data_dir;

	my ($postmaster) = split /\n/, slurp_file("$pgdata/postmaster.pid");
	$node->kill9;
	kill 'KILL', @children;

	my $deadline = time + $PostgreSQL::Test::Utils::timeout_default;
	for my $pid ($postmaster, @children)
	{
		while (pid_running($pid))
		{
			BAIL_OUT("server process $pid survived SIGKILL")
			  if time > $deadline;
			usleep(10_000);
		}
	}

	# A dead but unreaped postmaster leaves lock files that would stop the
	# new one from starting.
	if (kill 0, $postmaster)
	{
		note "postmaster $postmaster is dead but not reaped; "
		  . "removing its lock files";
		unlink "$pgdata/postmaster.pid";
		unlink $node->host . '/.s.PGSQL.' . $node->port . '.lock'
		  if $use_unix_sockets;
	}

	$node->start;
	return;
}

# Opens the session that will commit asynchronously: checkpoint (so the
# round starts from a clean slate), note the server's processes, freeze
# the WAL writers.  Returns the session and the processes to kill.
sub start_crash_round
{
	my $session = $node->background_psql('postgres');
	$session->query_safe('CHECKPOINT');
	my @children = server_pids($session);
	freeze_wal_writers($session);
	return ($session, @children);
}

sub finish_crash_round
{
	my ($session, @children) = @_;
	crash_and_restart(@children);
	# psql has not noticed yet that its server is gone; \q needs no server.
	$session->quit;
	return;
}

# Runs $query, which must fail; returns its error message, with SQLSTATE.
sub sql_error
{
	my ($query) = @_;
	my ($ret, $out, $err) =
	  $node->psql('postgres', "\\set VERBOSITY verbose\n$query");
	isnt($ret, 0, "fails: $query");
	return $err;
}

###############################################################################
# Control: the set-up loses an asynchronously committed transaction.
###############################################################################
{
	my ($session, @children) = start_crash_round();
	$session->query_safe('SET synchronous_commit = off');
	$session->query_safe("UPDATE plain SET val = 'async' WHERE id = 1");
	is($session->query_safe('SELECT val FROM plain WHERE id = 1'),
		'async', 'control: the asynchronous update committed');
	finish_crash_round($session, @children);
	is($node->safe_psql('postgres', 'SELECT val FROM plain WHERE id = 1'),
		'initial',
		'control: the crash lost an ordinary asynchronously committed update');
}

###############################################################################
# Acquire rounds.  A acquires 'job' (token a) in an ordinary session and
# writes under it; A's lease ends ($end: released, or expired while B waits);
# B acquires in an asynchronous session ($async: 'session' for SET
# synchronous_commit = off before an autocommitted call, 'local' for SET
# LOCAL inside an explicit transaction) and gets b; crash at once.  After
# recovery: the lease is B's with b, the mark is at least b, and A's token a
# is refused.
###############################################################################

my @acquire_rounds = (
	[ 'session', 'released' ],
	[ 'local', 'released' ],
	[ 'session', 'expired' ],
	[ 'local', 'expired' ],
	[ 'session', 'released' ],
	[ 'local', 'released' ],);

my $round = 0;
for my $r (@acquire_rounds)
{
	my ($async, $end) = @$r;
	$round++;
	my $what = "acquire round $round (synchronous_commit off by $async, "
	  . "A's lease $end)";

	my $ttl = $end eq 'expired' ? '2 seconds' : '1 hour';
	my $a = $node->safe_psql('postgres',
		"SELECT fencing_acquire('job', 'A$round', '$ttl')");
	like($a, qr/^\d+$/, "$what: A acquired token $a");
	$node->safe_psql('postgres',
		"UPDATE job_state SET token = $a, val = 'A$round' WHERE id = 1");
	if ($end eq 'released')
	{
		is( $node->safe_psql('postgres',
				"SELECT fencing_release('job', '$a')"),
			't', "$what: A released its lease");
	}

	my ($session, @children) = start_crash_round();
	# B waits for A's lease to expire when it has not been released.
	my $acquire =
	  $end eq 'expired'
	  ? "SELECT fencing_acquire('job', 'B$round', '1 hour', '30 seconds')"
	  : "SELECT fencing_acquire('job', 'B$round', '1 hour')";
	my $b;
	if ($async eq 'session')
	{
		$session->query_safe('SET synchronous_commit = off');
		$b = $session->query_safe($acquire);
		# The raise to 'on' was for the acquiring transaction only.
		is($session->query_safe('SHOW synchronous_commit'),
			'off', "$what: the session is still asynchronous after the acquire");
	}
	else
	{
		$session->query_safe('BEGIN');
		$session->query_safe('SET LOCAL synchronous_commit = off');
		$b = $session->query_safe($acquire);
		$session->query_safe('COMMIT');
	}
	like($b, qr/^\d+$/, "$what: B acquired token $b");
	cmp_ok($b, '>', $a, "$what: b > a");
	finish_crash_round($session, @children);

	is( $node->safe_psql('postgres',
			"SELECT holder || ' ' || token FROM fencing_leases WHERE lock_name = 'job'"),
		"B$round $b",
		"$what: after the crash the lease is B's, with token $b");
	my $mark = $node->safe_psql('postgres',
		"SELECT high_water FROM fencing_fences WHERE lock_name = 'job'");
	cmp_ok($mark, '>=', $b,
		"$what: after the crash the mark ($mark) is at least B's token");
	like(
		sql_error(
			"UPDATE job_state SET token = $a, val = 'stale A$round' WHERE id = 1"),
		qr/55Z01/,
		"$what: after the crash A's token $a is refused");
	is($node->safe_psql('postgres', 'SELECT val FROM job_state WHERE id = 1'),
		"A$round", "$what: A's stale write did not land");

	# Free the lock for the next round (false if B's lease was lost).
	$node->safe_psql('postgres', "SELECT fencing_release('job', '$b')");
}

###############################################################################
# Write rounds: no lease; B raises the mark of 'ledger' only by writing with
# its higher token in an asynchronous session.  A wrote with a first, in an
# ordinary session.  After the crash, B's write and the mark are there and
# A's token a is refused.
###############################################################################

my @write_rounds = (
	# [how synchronous_commit is turned off, B's statements]
	[ 'session', 'UPDATE ledger SET token = %b, val = %v WHERE id = 1' ],
	[ 'local', 'UPDATE ledger SET token = %b, val = %v WHERE id = 1' ],
	# The token presented for the transaction fills the row's column.
	[ 'local', "SELECT fencing_present('ledger', '%b'); UPDATE ledger SET val = %v WHERE id = 1" ],
	[ 'session', 'INSERT INTO ledger VALUES (100 + %n, %b, %v)' ],
	[ 'session', 'UPDATE ledger SET token = %b, val = %v WHERE id = 1' ],);

$round = 0;
for my $r (@write_rounds)
{
	my ($async, $statements) = @$r;
	$round++;
	my $what = "write round $round (synchronous_commit off by $async)";

	my $a = $node->safe_psql('postgres', 'SELECT fencing_grant()');
	$node->safe_psql('postgres',
		"UPDATE ledger SET token = $a, val = 'A$round' WHERE id = 1");
	my $b = $node->safe_psql('postgres', 'SELECT fencing_grant()');
	cmp_ok($b, '>', $a, "$what: tokens a = $a < b = $b");
	(my $sql = $statements) =~ s/%b/$b/g;
	$sql =~ s/%v/'B$round'/g;
	$sql =~ s/%n/$round/g;

	my ($session, @children) = start_crash_round();
	if ($async eq 'session')
	{
		$session->query_safe('SET synchronous_commit = off');
		$session->query_safe($sql);
	}
	else
	{
		$session->query_safe('BEGIN');
		$session->query_safe('SET LOCAL synchronous_commit = off');
		$session->query_safe($sql);
		$session->query_safe('COMMIT');
	}
	finish_crash_round($session, @children);

	my $mark = $node->safe_psql('postgres',
		"SELECT high_water FROM fencing_fences WHERE lock_name = 'ledger'");
	cmp_ok($mark, '>=', $b,
		"$what: after the crash the mark ($mark) is at least B's token $b");
	is( $node->safe_psql('postgres',
			"SELECT count(*) FROM ledger WHERE token = '$b' AND val = 'B$round'"),
		'1', "$what: B's write survived the crash");
	like(
		sql_error(
			"UPDATE ledger SET token = $a, val = 'stale A$round' WHERE id = 2"),
		qr/55Z01/,
		"$what: after the crash A's token $a is refused");
}

$node->stop;
done_testing();
