# Sessions (1.8) when the database goes back in time: a base backup
# restored, an older dump restored.  A session that was opened after the
# point of return is gone from the database that went back, but its holder
# may still be running -- a zombie with a session id and tokens the database
# no longer knows.  What must hold there:
#
#  - the session opened before the point is restored with its lease, as
#    durable as a plain lease (its row is in the backup and in the dump:
#    fencing_session is dumped with the database);
#  - the zombie's session is not there: its renewal answers false, an
#    acquire in it 55Z05, and its write under the lock is refused with
#    55Z01 once a new holder has the lock;
#  - a session opened afterwards never has the zombie's id (ids are grants
#    of fencing_grant(), anchored to the clock since 1.5), and its lease's
#    token is above the zombie's.
#
# Case 1 restores a base backup taken mid-history in place of a primary
# lost with an immediate stop; case 2 restores a pg_dump -Fc taken
# mid-history into a new database of the same cluster; case 3 recovers the
# base backup and the archive to an LSN before the zombie's session
# (point-in-time recovery, then promote); case 4 promotes an asynchronous
# standby that was cut off before the zombie's session reached it, after
# the primary crashed.  All preload the library (the expiry worker runs).

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

# Runs $sql in database $db of $node; returns its output and the SQLSTATE
# of its error ('' when there was none).
sub run_sql
{
	my ($node, $db, $sql) = @_;
	my ($rc, $out, $err) =
	  $node->psql($db, "\\set VERBOSITY verbose\n$sql", on_error_stop => 1);
	return ($out, '') if $rc == 0;
	my ($state) = $err =~ /ERROR:  ([0-9A-Z]{5}):/;
	return ($out, $state // "psql exit $rc: $err");
}

# Up to the point of return, in $db: the table under lock "part" (lock-wide
# fence), session "before" holding it and its write.  Returns the session.
sub set_up
{
	my ($node, $db) = @_;
	$node->safe_psql(
		$db, q{
CREATE EXTENSION pg_fencing;
CREATE TABLE parts (id int PRIMARY KEY, token fencing_token, v text);
INSERT INTO parts VALUES (1, NULL, 'initial');
SELECT fencing_protect('parts', lock_name => 'part');
});
	my $before = $node->safe_psql($db, "SELECT fencing_session_open('before', '1 hour')");
	my $token = $node->safe_psql($db, "SELECT fencing_session_acquire($before, 'part')");
	$node->safe_psql($db, "UPDATE parts SET token = '$token', v = 'before' WHERE id = 1");
	return $before;
}

# After the point of return: "before" lets the lock go, and the zombie's
# session takes it and writes.  Returns the zombie's session and token.
sub zombie
{
	my ($node, $db) = @_;
	$node->safe_psql($db,
		"SELECT fencing_release('part', token) FROM fencing_lease WHERE lock_name = 'part'");
	my $session = $node->safe_psql($db, "SELECT fencing_session_open('zombie', '1 hour')");
	my $token = $node->safe_psql($db, "SELECT fencing_session_acquire($session, 'part')");
	$node->safe_psql($db, "UPDATE parts SET token = '$token', v = 'zombie' WHERE id = 1");
	return ($session, $token);
}

# On the database that went back.
sub check_went_back
{
	my ($node, $db, $case, $before, $zombie_session, $zombie_token) = @_;
	is($node->safe_psql($db, 'SELECT v FROM parts'), 'before', "$case: the zombie's write is not there");
	is( $node->safe_psql(
			$db,
			"SELECT string_agg(holder || ':' || live || ':' || leases, ',' ORDER BY session_id) "
			  . "FROM fencing_sessions"),
		'before:true:1',
		"$case: the session opened before the point is back with its lease, the zombie's is not");
	is($node->safe_psql($db, "SELECT fencing_session_renew($zombie_session)"),
		'f', "$case: the zombie's session does not renew");
	my (undef, $state) =
	  run_sql($node, $db, "SELECT fencing_session_acquire($zombie_session, 'other')");
	is($state, '55Z05', "$case: nor can it take a lock");
	# The lock changes hands: the session from before is closed (its holder
	# gave the lock up long ago), a new session takes it.
	is($node->safe_psql($db, "SELECT fencing_session_close($before)"), '1', "$case: closed");
	my $new = $node->safe_psql($db, "SELECT fencing_session_open('new', '1 hour')");
	ok($new > $zombie_session, "$case: a new session's id ($new) is above the zombie's ($zombie_session)");
	my $token = $node->safe_psql($db, "SELECT fencing_session_acquire($new, 'part')");
	ok($token > $zombie_token,
		"$case: the new lease's token ($token) is above the zombie's ($zombie_token)");
	(undef, $state) =
	  run_sql($node, $db, "UPDATE parts SET token = '$token', v = 'new' WHERE id = 1");
	is($state, '', "$case: the new holder writes");
	(undef, $state) = run_sql($node, $db,
		"UPDATE parts SET token = '$zombie_token', v = 'zombie again' WHERE id = 1");
	is($state, '55Z01', "$case: the zombie's write is refused with 55Z01");
	is($node->safe_psql($db, 'SELECT v FROM parts'), 'new', "$case: the new holder's write stands");
}

# 1. A base backup restored in place of the lost primary.
my $primary = PostgreSQL::Test::Cluster->new('primary');
$primary->init(allows_streaming => 1);
$primary->append_conf('postgresql.conf', "shared_preload_libraries = 'pg_fencing'");
$primary->start;
my $before = set_up($primary, 'postgres');
$primary->backup('mid');
my ($zombie_session, $zombie_token) = zombie($primary, 'postgres');
$primary->stop('immediate');
my $restored = PostgreSQL::Test::Cluster->new('restored');
$restored->init_from_backup($primary, 'mid');
$restored->start;
check_went_back($restored, 'postgres', 'base backup', $before, $zombie_session, $zombie_token);
$restored->stop;

# 2. An older dump restored into a new database of the same cluster.
my $node = PostgreSQL::Test::Cluster->new('dumps');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'pg_fencing'");
$node->start;
$node->safe_psql('postgres', 'CREATE DATABASE app');
$before = set_up($node, 'app');
my $dump = "$PostgreSQL::Test::Utils::tmp_check/app.dump";
$node->command_ok([ 'pg_dump', '-Fc', '-d', $node->connstr('app'), '-f', $dump ],
	'pg_dump mid-history');
($zombie_session, $zombie_token) = zombie($node, 'app');
$node->safe_psql('postgres', 'CREATE DATABASE app_restored');
$node->command_ok([ 'pg_restore', '-d', $node->connstr('app_restored'), $dump ],
	'pg_restore into a new database');
check_went_back($node, 'app_restored', 'older dump', $before, $zombie_session, $zombie_token);
$node->stop;

# 3. Point-in-time recovery to an LSN before the zombie's session.
my $archived = PostgreSQL::Test::Cluster->new('archived');
$archived->init(allows_streaming => 1, has_archiving => 1);
$archived->append_conf('postgresql.conf', "shared_preload_libraries = 'pg_fencing'");
$archived->start;
$before = set_up($archived, 'postgres');
$archived->backup('base');
my $target = $archived->safe_psql('postgres', 'SELECT pg_current_wal_insert_lsn()');
# The first commit after the target: the recovery must stop before it.
$archived->safe_psql('postgres', 'CREATE TABLE after_target (x int)');
($zombie_session, $zombie_token) = zombie($archived, 'postgres');
my $walfile = $archived->safe_psql('postgres', 'SELECT pg_walfile_name(pg_current_wal_lsn())');
$archived->safe_psql('postgres', 'SELECT pg_switch_wal()');
$archived->poll_query_until('postgres',
	"SELECT last_archived_wal >= '$walfile' FROM pg_stat_archiver")
  or die "$walfile was never archived";
$archived->stop('immediate');
my $pitr = PostgreSQL::Test::Cluster->new('pitr');
$pitr->init_from_backup($archived, 'base', has_restoring => 1, standby => 0);
# archive_mode off: the recovered node must not archive a new timeline
# into the archive it restores from.
$pitr->append_conf(
	'postgresql.conf', qq{
recovery_target_lsn = '$target'
recovery_target_action = 'promote'
archive_mode = off
});
$pitr->start;
$pitr->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
  or die 'the recovered node never left recovery';
is($pitr->safe_psql('postgres', "SELECT to_regclass('after_target') IS NULL"),
	't', 'point-in-time recovery: stopped at the target');
check_went_back($pitr, 'postgres', 'point-in-time recovery', $before, $zombie_session,
	$zombie_token);
$pitr->stop;

# 4. An asynchronous standby promoted without the zombie's session.
my $streamed = PostgreSQL::Test::Cluster->new('streamed');
$streamed->init(allows_streaming => 1);
$streamed->append_conf('postgresql.conf', "shared_preload_libraries = 'pg_fencing'");
$streamed->start;
$before = set_up($streamed, 'postgres');
$streamed->backup('base');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($streamed, 'base', has_streaming => 1);
$standby->start;
$streamed->safe_psql('postgres', "SELECT fencing_session_renew($before)");
$streamed->wait_for_catchup($standby);
is($streamed->safe_psql('postgres', 'SELECT sync_state FROM pg_stat_replication'),
	'async', 'the standby is asynchronous');
# The network cut: the standby gets nothing more.
$standby->stop;
($zombie_session, $zombie_token) = zombie($streamed, 'postgres');
$streamed->stop('immediate');
$standby->start;
$standby->promote;
$standby->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
  or die 'the standby was not promoted';
check_went_back($standby, 'postgres', 'asynchronous standby promoted', $before,
	$zombie_session, $zombie_token);
$standby->stop;

done_testing();
