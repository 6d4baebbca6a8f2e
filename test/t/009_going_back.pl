# fencing_grant() must never hand out the same token twice, even after the
# database "goes back in time": a base backup restored, a point-in-time
# recovery, an asynchronous standby promoted without what the primary did
# last, an older dump restored.  Whatever the database forgot, the tokens it
# handed out are still held by someone (issue 23).  From 1.5 tokens are
# anchored to the clock: every backend's first grant, and with the library
# preloaded every reserved range of 1,024 tokens, starts at least at the
# microseconds since 1970 of that moment, so a database that went back
# grants above everything it handed out before.  fencing_bump_tokens(by)
# raises the tokens by hand, for a clock that cannot be trusted.
#
# Each event is a case of its own, on nodes of its own.  The set-up is the
# same every time: CREATE EXTENSION; a table "accounts" protected under a
# lock-wide fence (lock "L"); a few grants, a lease of holder-a (ttl 1 s,
# its token raised into the lock's mark) and its write under the lock.  Then
# the point the database will go back to (backup, target, standby cut off,
# dump); then more grants, and the zombie: a holder that gets its lease
# (token Z) AFTER that point, once holder-a's lease ran out, and writes
# with it under the lock.  Then the event.  On the node (or database) that
# went back -- after checking that it did: the zombie's write is not there
# -- the first grant and the first lease (new-holder, once the restored
# lease of holder-a ran out) must be above every token handed out before the
# event, and once new-holder has its lease, the zombie's write with Z must
# be refused with 55Z01 (while new-holder's own write passes), its renewal
# answers false and fencing_leader names new-holder.
#
#  1. Base backup restored: pg_basebackup -X stream mid-history; the primary
#     is lost (immediate stop); a node restored from the backup (WAL up to
#     the backup's end, no archive) takes its place.
#  2. Point-in-time recovery: an archiving primary, a backup, grants and a
#     write, the target captured (clock_timestamp() and
#     pg_current_wal_insert_lsn()), then the rest.  Two nodes restored from
#     the backup and the archive, one to recovery_target_time, one to
#     recovery_target_lsn, recovery_target_action = 'promote'.  A commit
#     right after the target ends the recovery there: without it, recovery
#     to a time would replay, up to the first commit after the target, the
#     sequence WAL of the grants after it.
#  3. Asynchronous standby promoted: the standby streams, is stopped (a
#     network cut), the primary grants more and gives the zombie its lease,
#     crashes (immediate stop); the standby is started -- it cannot catch up,
#     the primary is down -- and promoted.  Here the lease is taken before
#     the first plain grant, so that the lease is the node's first grant.
#  4. Older pg_dump restored: pg_dump -Fc mid-history, the rest, then
#     pg_restore into a new database of the same cluster and into a new
#     database of a second cluster (lease first there).  The zombie writes
#     in the restored databases.
#  5. fencing_bump_tokens(by): superuser only (PUBLIC has no EXECUTE; an
#     unprivileged LOGIN role gets 42501), by > 0 (22023 otherwise), a bump
#     past 9223372036854775807 refused with 22003 and changing nothing; a
#     bump of 1e9 returns a floor at least 1e9 above the last grant, and the
#     next grant, in the same session, in a new one and in a session that
#     granted before the bump, is above it.
#
# Every case runs twice: without the library preloaded, and with
# shared_preload_libraries = 'pg_fencing' (reserved ranges of 1,024).
#
# Why each case can fail: before 1.5 tokens are the values of a sequence,
# and a database that went back resumes the sequence where its WAL or its
# dump left it -- at most one sequence log-ahead (32 values) past the last
# grant it has, or one reserved range (1,024) with the library preloaded.
# So after the point of return each case grants more than that (40, or 1,100
# preloaded): before 1.5 the first grant after the event is a token handed
# out already, the zombie's Z is above the new holder's token, and its write
# passes.  Against 1.4, cases 1 to 4 fail that way in both modes (the base
# backup restored granted 7, and new-holder's lease was 8, when up to 47 had
# been handed out, 47 the zombie's; preloaded, 1025 and 1026 when up to
# 1107), and case 5 fails because there is no fencing_bump_tokens.  The
# numbers are reported with note().  No timing is asserted.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

my $test_start = time;

# The largest bigint, the largest token there can be.
my $max_bigint = '9223372036854775807';

sub lines { return grep { $_ ne '' } split /\n/, $_[0] // '' }

sub max_of
{
	my $max;
	for (@_) { $max = $_ if !defined($max) || $_ > $max }
	return $max;
}

# Runs $sql in one psql with ON_ERROR_STOP and VERBOSITY verbose; returns
# its stdout and the SQLSTATE of its error ('' when there was none).
# %params go to psql() (connstr, to connect as another role).
sub run_sql
{
	my ($node, $db, $sql, %params) = @_;
	my ($rc, $out, $err) =
	  $node->psql($db, "\\set VERBOSITY verbose\n$sql", on_error_stop => 1, %params);
	return ($out, '') if $rc == 0;
	my ($state) = $err =~ /ERROR:  ([0-9A-Z]{5}):/;
	return ($out, $state // "psql exit $rc: $err");
}

# $holder's lease of "L" (ttl 1 s) and its write of $balance on row $row
# of accounts, in one psql: the lease runs out a second after the acquire,
# and a transaction cannot write under a lease that has ended (1.6), so the
# write must follow at once -- two psql runs, or a base backup between, can
# be more than a second apart on a loaded machine.  A live holder calling
# again gets its own token back.  Returns the token and the write's SQLSTATE
# ('' when it passed).
sub acquire_and_write
{
	my ($node, $db, $holder, $row, $balance) = @_;
	my ($out, $state) = run_sql($node, $db, qq{
SELECT fencing_acquire('L', '$holder', '1 s') AS token \\gset
\\echo :token
UPDATE accounts SET token = :token, balance = $balance WHERE id = $row;
});
	my ($token) = lines($out);
	return ($token, $state);
}

# A new node, initialized and started, preloading the library if asked.
sub new_node
{
	my ($name, $preload, %init) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init(%init);
	$node->append_conf('postgresql.conf', "shared_preload_libraries = 'pg_fencing'")
	  if $preload;
	$node->start;
	return $node;
}

# The set-up in database $db of $node, up to the point the database will go
# back to: the extension, "accounts" under the lock-wide fence of lock "L",
# five grants, a lease of holder-a (ttl 1 s) and its write on row 1.  Returns
# the tokens handed out.
sub set_up
{
	my ($node, $db) = @_;
	$node->safe_psql(
		$db, q{
CREATE EXTENSION pg_fencing;
CREATE TABLE accounts (id int PRIMARY KEY, token fencing_token, balance int);
INSERT INTO accounts SELECT i, NULL, 100 FROM generate_series(1, 3) i;
SELECT fencing_protect('accounts', lock_name => 'L');
});
	my @seen = lines(
		$node->safe_psql($db, 'SELECT fencing_grant() FROM generate_series(1, 5)'));
	my ($token_a, $state) = acquire_and_write($node, $db, 'holder-a', 1, 101);
	die "set-up: holder-a's write failed ($state)" if $state ne '';
	push @seen, $token_a;
	return @seen;
}

# After the point of return, in database $db of $node: $burst grants, past
# what a sequence logs ahead (or a reserved range), then, once holder-a's
# lease has run out, the zombie's lease and its write on row 2.  Returns
# the zombie's token and every token handed out.
sub zombie_history
{
	my ($node, $db, $burst) = @_;
	my @seen = lines(
		$node->safe_psql($db, "SELECT fencing_grant() FROM generate_series(1, $burst)"));
	is(scalar(@seen), $burst, "granted $burst tokens after the point of return");
	$node->poll_query_until($db, "SELECT fencing_leader('L') IS NULL")
	  or die "holder-a's lease never ran out";
	my ($zombie, $state) = acquire_and_write($node, $db, 'zombie', 2, 102);
	like($zombie, qr/^\d+$/, "the zombie has its lease (token $zombie)");
	is($state, '', 'the zombie writes under the lock, before the event');
	note "after the point of return: granted $seen[0] .. $seen[-1], the zombie's token $zombie";
	return ($zombie, @seen, $zombie);
}

# On $node, database $db, which went back in time: the zombie's write is
# not there, the first grant and the first lease are above $max, every token
# handed out before, new-holder writes, and the zombie's write with its
# token is refused with 55Z01.  With $lease_first, the lease is taken before
# the first plain grant.
sub check_went_back
{
	my ($node, $db, $label, $max, $zombie, %opt) = @_;

	is($node->safe_psql($db, "SELECT coalesce(token::text, '') || ':' || balance FROM accounts WHERE id = 2"),
		':100', "$label: the database went back: the zombie's write is not there");

	my ($grant, $lease);
	my $take_lease = sub {
		$node->poll_query_until($db, "SELECT fencing_leader('L') IS NULL")
		  or die "$label: the restored lease of holder-a never ran out";
		$lease = $node->safe_psql($db,
			"SELECT coalesce(fencing_acquire('L', 'new-holder', '10 s')::text, 'NULL')");
	};
	$take_lease->() if $opt{lease_first};
	$grant = $node->safe_psql($db, 'SELECT fencing_grant()');
	$take_lease->() unless $opt{lease_first};

	my ($first, $second) = $opt{lease_first} ? ('first', 'next') : ('next', 'first');
	cmp_ok($grant, '>', $max,
		"$label: the $second plain grant ($grant) is above every token handed out before ($max)");
	like($lease, qr/^\d+$/, "$label: new-holder has the lease");
	$lease = 0 unless $lease =~ /^\d+$/;
	cmp_ok($lease, '>', $max,
		"$label: the $first lease ($lease) is above every token handed out before ($max)");
	note "$label: handed out up to $max before the event (zombie $zombie); "
	  . "after it, lease $lease and plain grant $grant"
	  . ($grant <= $max || $lease <= $max ? ' -- handed out twice' : '');

	my (undef, $state) = run_sql($node, $db,
		"UPDATE accounts SET token = $lease, balance = 103 WHERE id = 1");
	is($state, '', "$label: new-holder writes under the lock");
	(undef, $state) = run_sql($node, $db,
		"UPDATE accounts SET token = $zombie, balance = 0 WHERE id = 2");
	is($state, '55Z01',
		"$label: the zombie's write with its token $zombie is refused (55Z01) once new-holder has its lease ($lease)"
	);
	is($node->safe_psql($db, 'SELECT balance FROM accounts WHERE id = 2'),
		'100', "$label: the zombie's write did not land");
	# What the zombie sees of its lease: nothing the database remembers.
	is($node->safe_psql($db, "SELECT fencing_renew('L', '$zombie', '1 s')"),
		'f', "$label: the zombie's renewal answers false");
	is($node->safe_psql($db, "SELECT fencing_leader('L')"),
		'new-holder', "$label: fencing_leader names new-holder, not the zombie");
	return;
}

for my $preload (0, 1)
{
	my $mode = $preload ? 'preloaded' : 'not preloaded';
	my $sfx = $preload ? 'pre' : 'plain';
	# Past one sequence log-ahead (32), or one reserved range (1,024).
	my $burst = $preload ? 1100 : 40;

	###########################################################################
	# 1. Base backup restored; the primary is lost.
	###########################################################################

	subtest "1. base backup restored ($mode)" => sub {
		my $start = time;
		my $primary = new_node("backup_primary_$sfx", $preload, allows_streaming => 1);
		my @seen = set_up($primary, 'postgres');
		$primary->backup('b', backup_options => [ '-X', 'stream' ]);
		my ($zombie, @after) = zombie_history($primary, 'postgres', $burst);
		push @seen, @after;
		$primary->stop('immediate');

		my $restored = PostgreSQL::Test::Cluster->new("backup_restored_$sfx");
		$restored->init_from_backup($primary, 'b');
		$restored->start;
		check_went_back($restored, 'postgres', "base backup restored ($mode)",
			max_of(@seen), $zombie);
		$restored->stop;
		note sprintf('case 1 (%s): %.1f s', $mode, time - $start);
	};

	###########################################################################
	# 2. Point-in-time recovery, to a time and to an LSN.
	###########################################################################

	subtest "2. point-in-time recovery ($mode)" => sub {
		my $start = time;
		my $primary = new_node("pitr_primary_$sfx", $preload,
			allows_streaming => 1,
			has_archiving => 1);
		my @seen = set_up($primary, 'postgres');
		$primary->backup('b');

		# History the recovery keeps: grants and a write on row 3 under
		# holder-a's lease (the lock's mark: a token the lock's leases never
		# gave out is refused, 55Z03) -- taken again, as the backup may have
		# outlasted its second.
		my @mid = lines(
			$primary->safe_psql('postgres', 'SELECT fencing_grant() FROM generate_series(1, 3)'));
		push @seen, @mid;
		my ($token_a, $state) = acquire_and_write($primary, 'postgres', 'holder-a', 3, 104);
		die "holder-a's write on row 3 failed ($state)" if $state ne '';
		push @seen, $token_a;
		my ($target_time, $target_lsn) = split /\|/,
		  $primary->safe_psql('postgres',
			'SELECT clock_timestamp(), pg_current_wal_insert_lsn()');
		# The first commit after the target: recovery stops here.
		$primary->safe_psql('postgres', 'CREATE TABLE after_target (x int)');

		my ($zombie, @after) = zombie_history($primary, 'postgres', $burst);
		push @seen, @after;

		my $walfile = $primary->safe_psql('postgres',
			'SELECT pg_walfile_name(pg_current_wal_lsn())');
		$primary->safe_psql('postgres', 'SELECT pg_switch_wal()');
		$primary->poll_query_until('postgres',
			"SELECT last_archived_wal >= '$walfile' FROM pg_stat_archiver")
		  or die "$walfile was never archived";
		$primary->stop('immediate');

		for my $target ([ 'time', $target_time ], [ 'lsn', $target_lsn ])
		{
			my ($kind, $value) = @$target;
			my $label = "recovery_target_$kind ($mode)";
			my $restored = PostgreSQL::Test::Cluster->new("pitr_${kind}_$sfx");
			$restored->init_from_backup($primary, 'b', has_restoring => 1, standby => 0);
			# archive_mode off: a restored node must not archive its new
			# timeline into the archive the next one restores from.
			$restored->append_conf(
				'postgresql.conf', qq{
recovery_target_$kind = '$value'
recovery_target_action = 'promote'
archive_mode = off
});
			$restored->start;
			$restored->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
			  or die "$label: the restored node never left recovery";
			is($restored->safe_psql('postgres', 'SELECT token || \':\' || balance FROM accounts WHERE id = 3'),
				"$token_a:104", "$label: the recovery kept the history before the target");
			is($restored->safe_psql('postgres', "SELECT to_regclass('after_target') IS NULL"),
				't', "$label: and stopped at the target");
			check_went_back($restored, 'postgres', $label, max_of(@seen), $zombie);
			$restored->stop;
		}
		note sprintf('case 2 (%s): %.1f s', $mode, time - $start);
	};

	###########################################################################
	# 3. Asynchronous standby promoted after the primary crashed.
	###########################################################################

	subtest "3. asynchronous standby promoted ($mode)" => sub {
		my $start = time;
		my $primary = new_node("async_primary_$sfx", $preload, allows_streaming => 1);
		my @seen = set_up($primary, 'postgres');
		$primary->backup('b');
		my $standby = PostgreSQL::Test::Cluster->new("async_standby_$sfx");
		$standby->init_from_backup($primary, 'b', has_streaming => 1);
		$standby->start;
		# History the standby receives.
		push @seen,
		  lines($primary->safe_psql('postgres', 'SELECT fencing_grant() FROM generate_series(1, 3)'));
		$primary->wait_for_catchup($standby);
		is($primary->safe_psql('postgres', 'SELECT sync_state FROM pg_stat_replication'),
			'async', 'the standby is asynchronous');

		# The network cut: the standby gets nothing more.
		$standby->stop;
		my ($zombie, @after) = zombie_history($primary, 'postgres', $burst);
		push @seen, @after;
		$primary->stop('immediate');

		$standby->start;
		$standby->promote;
		$standby->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
		  or die 'the standby was not promoted';
		check_went_back($standby, 'postgres', "asynchronous standby promoted ($mode)",
			max_of(@seen), $zombie, lease_first => 1);
		$standby->stop;
		note sprintf('case 3 (%s): %.1f s', $mode, time - $start);
	};

	###########################################################################
	# 4. An older pg_dump restored into a new database.
	###########################################################################

	# Case 5 uses this node too.
	my $node = new_node("dump_source_$sfx", $preload);

	subtest "4. older pg_dump restored ($mode)" => sub {
		my $start = time;
		$node->safe_psql('postgres', 'CREATE DATABASE shop');
		my @seen = set_up($node, 'shop');
		my $dump_file = $PostgreSQL::Test::Utils::tmp_check . "/going_back_$sfx.dump";
		$node->command_ok(
			[ 'pg_dump', '-Fc', '-f', $dump_file, '-d', $node->connstr('shop') ],
			'pg_dump -Fc mid-history');
		my ($zombie, @after) = zombie_history($node, 'shop', $burst);
		push @seen, @after;
		my $max = max_of(@seen);

		# The same cluster, a new database.
		$node->command_ok([ 'createdb', '-h', $node->host, '-p', $node->port, 'shop_restored' ],
			'createdb shop_restored');
		$node->command_ok(
			[
				'pg_restore', '--exit-on-error',
				'-d', $node->connstr('shop_restored'), $dump_file
			],
			'pg_restore into a new database of the same cluster');
		check_went_back($node, 'shop_restored', "dump restored in the same cluster ($mode)",
			$max, $zombie);

		# A second cluster.
		my $other = new_node("dump_target_$sfx", $preload);
		$other->command_ok([ 'createdb', '-h', $other->host, '-p', $other->port, 'shop' ],
			'createdb shop in a second cluster');
		$other->command_ok(
			[ 'pg_restore', '--exit-on-error', '-d', $other->connstr('shop'), $dump_file ],
			'pg_restore into a new database of a second cluster');
		check_went_back($other, 'shop', "dump restored in a second cluster ($mode)",
			$max, $zombie, lease_first => 1);
		$other->stop;
		note sprintf('case 4 (%s): %.1f s', $mode, time - $start);
	};

	###########################################################################
	# 5. fencing_bump_tokens(by).
	###########################################################################

	subtest "5. fencing_bump_tokens ($mode)" => sub {
		$node->safe_psql('postgres', 'CREATE DATABASE bump');
		$node->safe_psql('bump', 'CREATE EXTENSION pg_fencing');
		note 'extension version: '
		  . $node->safe_psql('bump',
			"SELECT extversion FROM pg_extension WHERE extname = 'pg_fencing'");
		$node->safe_psql('bump', 'CREATE ROLE bump_app LOGIN');

		my ($out, $state) = run_sql($node, 'bump',
			"SELECT has_function_privilege('bump_app', 'fencing_bump_tokens(bigint)', 'EXECUTE')");
		is("$out$state", 'f', 'an unprivileged role may not execute fencing_bump_tokens');

		# A session that granted before the bump.
		my $before = $node->background_psql('bump');
		my $last = $before->query_safe('SELECT fencing_grant()');

		# One above the last grant was never handed out -- with the library
		# preloaded, the reserved range's end is above it, unused -- and a
		# per-row fence refuses it (55Z03); the last grant itself passes.
		$node->safe_psql('bump',
			"CREATE TABLE r (id int PRIMARY KEY, tok fencing_token); INSERT INTO r VALUES (1, NULL); SELECT fencing_protect('r')");
		my $above = $last + 1;
		($out, $state) = run_sql($node, 'bump', "UPDATE r SET tok = $above");
		is($state, '55Z03', "one above the last grant ($above) is refused as never granted");
		($out, $state) = run_sql($node, 'bump', "UPDATE r SET tok = $last");
		is($state, '', 'the last grant passes');

		($out, $state) = run_sql($node, 'bump', 'SELECT fencing_bump_tokens(1000000000)',
			connstr => $node->connstr('bump') . ' user=bump_app');
		is($state, '42501', 'an unprivileged LOGIN role gets 42501');
		for my $by ('0', '-1', '-1000000000')
		{
			($out, $state) = run_sql($node, 'bump', "SELECT fencing_bump_tokens($by)");
			is($state, '22023', "by = $by is refused with 22023");
		}
		for my $by ($max_bigint, '9223000000000000000')
		{
			($out, $state) = run_sql($node, 'bump', "SELECT fencing_bump_tokens($by)");
			is($state, '22003', "a bump by $by, past the largest bigint, is refused with 22003");
		}
		# A new session: its first grant may start at the clock, which has
		# moved on by a fraction of a second since $last, not by an hour.
		my $next;
		($next, $state) = run_sql($node, 'bump', 'SELECT fencing_grant()');
		is($state, '', 'after the refused bumps, grants still work');
		$next = 0 unless $next =~ /^\d+$/;
		cmp_ok($next, '>', $last, "after the refused bumps, the next grant ($next) is above the last ($last)");
		cmp_ok($next, '<', $last + 3_600_000_000,
			"and the refused bumps moved nothing (less than an hour of microseconds above it)");
		$last = $next;

		# The bump, and the next grant in the same session.
		($out, $state) = run_sql($node, 'bump',
			"SELECT fencing_bump_tokens(1000000000);\nSELECT fencing_grant();");
		is($state, '', 'the superuser bumps the tokens by 1e9');
		my ($floor, $same) = lines($out);
		$floor = 0 unless defined $floor && $floor =~ /^\d+$/;
		$same = 0 unless defined $same && $same =~ /^\d+$/;
		my $want = $last + 1_000_000_000;
		cmp_ok($floor, '>=', $want,
			"the floor returned ($floor) is at least 1e9 above the last grant ($last)");
		# Judged against the floor, and against last + 1e9 should the bump
		# have returned nothing.
		$floor = $want if $floor < $want;
		cmp_ok($same, '>', $floor, "the next grant in the same session ($same) is above the floor ($floor)");
		my $new = $node->safe_psql('bump', 'SELECT fencing_grant()');
		cmp_ok($new, '>', $floor, "the next grant in a new session ($new) is above the floor");
		my $old = $before->query_safe('SELECT fencing_grant()');
		cmp_ok($old, '>', $floor,
			"the next grant in a session that granted before the bump ($old) is above the floor");
		$before->quit;
		note "fencing_bump_tokens ($mode): last grant $last, floor $floor, "
		  . "then grants $same, $new, $old";
	};
	$node->stop;
}

note sprintf('total: %.1f s', time - $test_start);
done_testing();
