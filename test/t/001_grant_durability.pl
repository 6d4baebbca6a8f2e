# fencing_grant() must never hand out the same token twice, even when the
# server crashes right after the grant and the granting transaction rolled
# back, was still open, or committed with synchronous_commit = off.  And a
# pg_dump / pg_restore must carry the token sequence along, so a restored
# database keeps granting above every token granted before the dump.
#
# The crashes here are kill -9 of every server process.  That loses what is
# in shared memory -- the WAL buffers in particular -- but not what has been
# write()n to the OS, so a WAL record survives the crash exactly when
# something wrote it out of the WAL buffers first.  (Cluster.pm runs with
# fsync = off, so "flushed" and "written" are the same thing here; a power
# loss would also need the fsync, which XLogFlush does when fsync is on.)

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

# SIGSTOP, SIGKILL and /proc: POSIX only.
plan skip_all => 'crash simulation needs POSIX signals' if $windows_os;

my $node = PostgreSQL::Test::Cluster->new('fencing');
$node->init;

# Nothing but our own backend may write the WAL out between the grant and
# the crash, or a lost-token bug would go unseen (and the control below
# would show nothing):
#
# - wal_writer_delay = 10s, its maximum.  The WAL writer writes the WAL of
#   rolled-back and asynchronously committed transactions on its next
#   cycle, so with the default 200ms it could beat our crash.  (Leave
#   wal_writer_flush_after alone: 0 would make every cycle flush, not
#   fewer, and it only decides when to fsync what a cycle has written, which
#   a kill -9 does not care about.)  The WAL writer still wakes early when
#   a commit or abort completes a WAL page, so on top of this the crash
#   rounds freeze it with SIGSTOP (see freeze_wal_writers below): the
#   setting is the fallback, the freeze makes it deterministic.
# - checkpoint_timeout = 1h: a checkpoint flushes the WAL.
# - bgwriter_lru_maxpages = 0: writing a dirty sequence page out first
#   flushes the WAL up to its LSN.
# - autovacuum = off: no other transactions committing (and flushing).
$node->append_conf(
	'postgresql.conf', q{
wal_writer_delay = 10s
checkpoint_timeout = 1h
bgwriter_lru_maxpages = 0
autovacuum = off
});
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION pg_fencing');

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

# Stop every process that could write the WAL out behind our back: the WAL
# writer (see above), the background writer and the checkpointer.  They
# stay stopped until the crash kills them.  This pins the crash inside the
# window a real crash can hit -- after the grant, before anyone else wrote
# its WAL -- instead of racing the WAL writer for it.
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
		# The state follows the ")" that closes the command name.
		my ($state) = $stat =~ /\)\s+(\S)/;
		return defined($state) && $state ne 'Z' && $state ne 'X';
	}
	return kill(0, $pid) ? 1 : 0;    # no /proc: count zombies as running
}

# Crash the server: SIGKILL the postmaster, then at once every other server
# process (so that none of them gets to write anything on its way out, as
# in a real crash), wait until they are all gone, and start it again, which
# runs crash recovery.
sub crash_and_restart
{
	my ($node, @children) = @_;
	my $pgdata = $node->data_dir;

	my ($postmaster) =
	  split /\n/, slurp_file("$pgdata/postmaster.pid");
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

	# The new postmaster refuses to start while the PID in a lock file still
	# exists, and a dead postmaster stays a zombie until something reaps it:
	# its parent, pg_ctl, is gone, and the init process of a container may
	# reap late or never.  It is dead, so its lock files are stale.
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

# One crash round: checkpoint; then in a new session with
# synchronous_commit = off, BEGIN, run $sql $count times, end the
# transaction as $ending says ('rollback', 'commit' or 'open': no end, the
# crash finds it in progress), and crash the server with the WAL writers
# frozen.  Returns the values the session got, in order.
#
# nextval() WAL-logs a sequence only on its first call after a checkpoint
# and then every 32 calls, each record covering the next 32 values.  Without
# the checkpoint, a round would draw on values logged (and made durable) by
# the check after the previous crash, and put nothing at risk.
sub crash_round
{
	my ($node, $sql, $count, $ending) = @_;

	my $session = $node->background_psql('postgres');
	$session->query_safe('CHECKPOINT');
	my @children = server_pids($session);
	freeze_wal_writers($session);

	$session->query_safe('SET synchronous_commit = off');
	$session->query_safe('BEGIN');
	my @got = map { $session->query_safe($sql) } 1 .. $count;
	if ($ending eq 'rollback')
	{
		$session->query_safe('ROLLBACK');
	}
	elsif ($ending eq 'commit')
	{
		$session->query_safe('COMMIT');
	}
	else
	{
		die "unknown ending $ending" unless $ending eq 'open';
	}

	crash_and_restart($node, @children);
	# psql has not noticed yet that its server is gone; \q needs no server.
	$session->quit;
	return @got;
}

sub max_of
{
	my $max;
	for (@_) { $max = $_ if !defined($max) || $_ > $max }
	return $max;
}

sub strictly_increasing
{
	my @v = @_;
	for my $i (1 .. $#v) { return 0 unless $v[$i] > $v[ $i - 1 ] }
	return 1;
}

###############################################################################
# Control: the hazard is real.  A plain CACHE 1 sequence, used the same way,
# hands out the same values again after the crash: nextval() logged them in
# WAL that never left the WAL buffers.
###############################################################################

$node->safe_psql('postgres', 'CREATE SEQUENCE plain_seq CACHE 1');

for my $ending ('rollback', 'open', 'commit')
{
	my @before =
	  crash_round($node, "SELECT nextval('plain_seq')", 5, $ending);
	my $after = $node->safe_psql('postgres', "SELECT nextval('plain_seq')");
	my $max = max_of(@before);
	cmp_ok($after, '<=', $max,
		"control, transaction $ending at the crash: nextval() repeats a value after the crash "
		  . "(got @before before, $after after)");
}

###############################################################################
# fencing_grant(): the same crashes, and every token granted after a crash
# is above every token granted before it.
###############################################################################

# [transaction end at the crash, grants in it]; 40 grants cross nextval's
# 32-value log-ahead, so the sequence is WAL-logged again mid-transaction.
my @rounds = (
	[ 'rollback', 5 ],
	[ 'open', 5 ],
	[ 'commit', 5 ],
	[ 'rollback', 40 ],
	[ 'open', 40 ],);

my @all_granted;
for my $round (@rounds)
{
	my ($ending, $count) = @$round;
	my @before = crash_round($node, 'SELECT fencing_grant()', $count, $ending);
	ok(strictly_increasing(@before),
		"transaction $ending, $count grants: tokens strictly increasing");
	push @all_granted, @before;

	my $after = $node->safe_psql('postgres', 'SELECT fencing_grant()');
	my $max = max_of(@all_granted);
	cmp_ok($after, '>', $max,
		"transaction $ending at the crash, $count grants: "
		  . "first grant after the crash ($after) is above every token granted before ($max)"
	);
	push @all_granted, $after;
}

###############################################################################
# pg_dump / pg_restore: the sequence is an extension configuration table
# (pg_extension_config_dump), so its value is in the dump, and the restored
# database grants above every token granted before the dump.
###############################################################################

$node->safe_psql('postgres', 'CREATE DATABASE dump_source');
$node->safe_psql('dump_source', 'CREATE EXTENSION pg_fencing');
my @dumped = split /\n/,
  $node->safe_psql('dump_source',
	'SELECT fencing_grant() FROM generate_series(1, 50)');
is(scalar(@dumped), 50, 'granted 50 tokens before the dump');
# A lease is state too: its row is dumped with its token and expiry.
my $lease_token = $node->safe_psql('dump_source',
	"SELECT fencing_acquire('nightly', 'worker-1', '1 hour')");
push @dumped, $lease_token;
my $max_dumped = max_of(@dumped);
# The lock model is state too: who owns which lock, who may use it, who may
# create names.  Roles are cluster-wide, so they are there for the restore.
$node->safe_psql(
	'dump_source', q{
CREATE ROLE dump_app;
CREATE ROLE dump_helper;
CREATE ROLE dump_stranger;
GRANT CREATE ON SCHEMA public TO dump_app;
SELECT fencing_allow_create('dump_app', 'app/');
SET ROLE dump_app;
CREATE TABLE app_rows (id int PRIMARY KEY, tok fencing_token, v text);
SELECT fencing_protect('app_rows', lock_name => 'app/rows');
SELECT fencing_grant_lock('app/rows', 'dump_helper');
GRANT SELECT, INSERT, UPDATE ON app_rows TO dump_helper, dump_stranger;
RESET ROLE;
});
my $dumped_locks = $node->safe_psql('dump_source',
	'SELECT lock_name, owner, users, lock_id FROM fencing_lock ORDER BY 1');

my $dump_file = $PostgreSQL::Test::Utils::tmp_check . '/dump_source.dump';
$node->command_ok(
	[ 'pg_dump', '-Fc', '-f', $dump_file, '-d', $node->connstr('dump_source') ],
	'pg_dump -Fc');
$node->safe_psql('postgres', 'CREATE DATABASE dump_target');
$node->command_ok(
	[
		'pg_restore', '--exit-on-error',
		'-d', $node->connstr('dump_target'), $dump_file
	],
	'pg_restore into a new database');

is( $node->safe_psql(
		'dump_target',
		"SELECT extversion FROM pg_extension WHERE extname = 'pg_fencing'"),
	$node->safe_psql(
		'dump_source',
		"SELECT extversion FROM pg_extension WHERE extname = 'pg_fencing'"),
	'the restore created the extension, at the version of the dumped database');
is( $node->safe_psql(
		'dump_target',
		"SELECT holder || ' ' || token || ' ' || live FROM fencing_leases WHERE lock_name = 'nightly'"
	),
	"worker-1 $lease_token true",
	'the restored database has the lease, its token and its expiry');
is($node->safe_psql('dump_target',
		'SELECT lock_name, owner, users, lock_id FROM fencing_lock ORDER BY 1'),
	$dumped_locks, 'the restored database has the locks, their owners, users and ids');
is($node->safe_psql('dump_target', 'SELECT creator, prefix FROM fencing_lock_creators'),
	'dump_app|app/', 'and the creator rules');
# The restored guard judges roles as before: the owner's member and the
# grantee may write under the lock, a stranger with table privileges may not.
my ($ret, $out, $err) = $node->psql('dump_target',
	"SET ROLE dump_stranger; INSERT INTO app_rows VALUES (1, '$lease_token', 'x')");
like($err, qr/permission denied for fencing lock "app\/rows"/,
	'a role not allowed on the lock cannot write under it after the restore');
is($node->safe_psql('dump_target',
		"SET ROLE dump_helper; INSERT INTO app_rows VALUES (1, '$lease_token', 'x') RETURNING v"),
	'x', 'a role granted the lock writes under it after the restore');
# The lock id sequence came along: a new lock gets an id no restored lock has.
$node->safe_psql('dump_target', "SELECT fencing_create_lock('app/new')");
is($node->safe_psql('dump_target',
		"SELECT count(DISTINCT lock_id) = count(*) FROM fencing_lock"),
	't', 'a lock created after the restore has an id of its own');
is($node->safe_psql('dump_target',
		"SELECT evtenabled FROM pg_event_trigger WHERE evtname = 'fencing_refuse_tampering'"),
	'O', 'the tampering event trigger is there, enabled');
my $restored = $node->safe_psql('dump_target', 'SELECT fencing_grant()');
cmp_ok($restored, '>', $max_dumped,
	"first grant in the restored database ($restored) is above every token granted before the dump ($max_dumped)"
);

$node->stop;
done_testing();
