# A follower waiting in CALL fencing_await (1.7) holds no snapshot and no
# transaction id, so VACUUM removes the rows that died while it waits; a
# follower waiting in fencing_acquire(..., wait) holds its statement's
# snapshot, and VACUUM cannot (which is why docs/leases.md sends long waits to
# fencing_await).  Both cases run the same churn, so the second shows that
# the first could fail.  Then fencing_audit() names a function-form waiter
# (to the roles that may see it), and not a fencing_await one; and an
# exclusive acquirer in fencing_await keeps its priority over new shared
# grants; and its attempts' lock waits end with the wait.
use strict;
use warnings;

use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('horizon');
$node->init;
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION pg_fencing');
$node->safe_psql('postgres',
	'CREATE TABLE churn (id int PRIMARY KEY, v int) WITH (autovacuum_enabled = off); '
	  . 'INSERT INTO churn SELECT g, 0 FROM generate_series(1, 2000) g');
$node->safe_psql('postgres', "SELECT fencing_acquire('hz', 'leader', '1 hour')");

# Starts psql on $sql as application $name, in the background.
sub start_psql
{
	my ($name, $sql) = @_;
	my $file = "$PostgreSQL::Test::Utils::tmp_check/$name.sql";
	unlink $file;
	append_to_file($file, "$sql;\n");
	my ($out, $err) = ('', '');
	my $h = IPC::Run::start(
		[
			'psql', '-XAtq', '-f', $file, '-d',
			$node->connstr('postgres') . " application_name=$name"
		],
		'<', \undef, '>', \$out, '2>', \$err);
	return { h => $h, out => \$out, err => \$err };
}

# The follower's backend_xid and backend_xmin ('' when NULL), once it
# sleeps on its latch.
sub follower_ids
{
	my ($name) = @_;
	$node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM pg_stat_activity WHERE application_name = '$name' "
		  . "AND wait_event_type = 'Extension'")
	  or die "$name never slept on its latch";
	return $node->safe_psql('postgres',
		"SELECT coalesce(backend_xid::text, '') || '/' || coalesce(backend_xmin::text, '') "
		  . "FROM pg_stat_activity WHERE application_name = '$name'");
}

# Updates every row of churn (2,000 dead versions), then VACUUMs it and
# returns how many dead rows it could not remove.
sub churn_and_vacuum
{
	$node->safe_psql('postgres', 'UPDATE churn SET v = v + 1');
	my ($rc, $out, $err) =
	  $node->psql('postgres', 'VACUUM (VERBOSE) churn', on_error_die => 1);
	$err =~ /(\d+) are dead but not yet removable/
	  or die "no dead-row count in VACUUM VERBOSE: $err";
	return $1;
}

# 1. fencing_await: nothing held, everything removed.  The follower's wait
# (8 s) outlasts the churn; it sleeps between short attempts meanwhile.
my $await = start_psql('await-follower', "CALL fencing_await('hz', 'f1', '1 hour', '8 s')");
is(follower_ids('await-follower'), '/', 'fencing_await waits with no xid and no xmin');
is(churn_and_vacuum(), 0, 'VACUUM removes every row that died during fencing_await');
is(follower_ids('await-follower'), '/', 'still none after the churn');
$await->{h}->finish;
is($await->{h}->result(0), 0, 'the CALL ended without an error') or diag ${ $await->{err} };
like(${ $await->{out} }, qr/\A\s*\z/, 'the wait ran out: a NULL token');

# 2. The function form: its snapshot holds the horizon for the whole wait.
my $function = start_psql('function-follower',
	"SELECT fencing_acquire('hz', 'f2', '1 hour', '8 s')");
my $ids = follower_ids('function-follower');
like($ids, qr{^/\d+$}, 'a waiting fencing_acquire holds an xmin');
is(churn_and_vacuum(), 2000,
	'VACUUM removes none of the rows that died during a waiting fencing_acquire');
$function->{h}->finish;

# 3. fencing_audit() names the function-form waiter (past
# pg_fencing.audit_long_wait, 1 s here), not the one in fencing_await that
# waits behind it in the lock's waiting room, and only to a role that may
# both use the lock and see the session in pg_stat_activity.
$node->safe_psql('postgres',
	'CREATE ROLE stats_only LOGIN IN ROLE pg_read_all_stats; '
	  . 'CREATE ROLE lock_only LOGIN; '
	  . 'CREATE ROLE lock_and_stats LOGIN IN ROLE pg_read_all_stats; '
	  . "SELECT fencing_grant_lock('hz', 'lock_only'); "
	  . "SELECT fencing_grant_lock('hz', 'lock_and_stats'); "
	  . "ALTER DATABASE postgres SET pg_fencing.audit_long_wait = '1s'");
# A holder granted a lock inside a longer transaction keeps the lock's
# waiting room until it ends, but waits for nothing: not reported.
my $busy_leader = start_psql('busy-leader',
	"BEGIN; SELECT fencing_acquire('hz-2', 'busy', '1 hour') IS NOT NULL; SELECT pg_sleep(6); COMMIT");
$function = start_psql('function-follower',
	"SELECT fencing_acquire('hz', 'f3', '1 hour', '8 s')");
follower_ids('function-follower');
$await = start_psql('await-follower', "CALL fencing_await('hz', 'f4', '1 hour', '8 s')");
$node->poll_query_until('postgres',
	"SELECT count(*) = 1 FROM pg_stat_activity WHERE application_name = 'await-follower' "
	  . "AND wait_event_type = 'Lock'")
  or die 'await-follower never queued behind function-follower';
my $function_pid = $node->safe_psql('postgres',
	"SELECT pid FROM pg_stat_activity WHERE application_name = 'function-follower'");

# The audit's reports of waits, as role $role.
sub waits_reported
{
	my ($role) = @_;
	return $node->safe_psql('postgres',
		"SET ROLE $role; SELECT lock_name, substring(problem FROM '^session (\\d+) has waited') "
		  . "FROM fencing_audit() WHERE problem LIKE 'session % has waited %'");
}
$node->poll_query_until('postgres',
	"SELECT count(*) = 1 FROM fencing_audit() WHERE problem LIKE 'session $function_pid has waited %'")
  or die 'fencing_audit() never reported the function-form waiter';
is(waits_reported('postgres'), "hz|$function_pid",
	'fencing_audit() reports the function-form waiter, not the fencing_await one, nor a holder busy in its transaction');
is($node->safe_psql('postgres',
		"SET pg_fencing.audit_long_wait = '1min'; "
		  . "SELECT count(*) FROM fencing_audit() WHERE problem LIKE 'session % has waited %'"),
	'0', 'not before pg_fencing.audit_long_wait (the default: a minute)');
is(waits_reported('lock_and_stats'), "hz|$function_pid",
	'a role that may use the lock and read all statistics sees it');
is(waits_reported('stats_only'), '', 'not a role that may not use the lock');
is(waits_reported('lock_only'), '', 'not a role that cannot see the session');
$function->{h}->finish;
$await->{h}->finish;
$busy_leader->{h}->finish;

# 4. Writer priority through fencing_await: an exclusive acquirer waiting
# in it holds the lock's waiting room, so no new shared lease is granted
# until it has had its turn; the last shared release hands it the lock.
my $reader1 = $node->safe_psql('postgres', "SELECT fencing_acquire_shared('wp', 'reader1', '1 hour')");
my $reader2 = $node->safe_psql('postgres', "SELECT fencing_acquire_shared('wp', 'reader2', '1 hour')");
like($reader2, qr/^\d+$/, 'two shared leases side by side');
$node->safe_psql('postgres', "SELECT fencing_release('wp', '$reader2')");
my $writer = start_psql('await-writer', "CALL fencing_await('wp', 'writer', '1 hour', '60 s')");
follower_ids('await-writer');
is($node->safe_psql('postgres', "SELECT fencing_acquire_shared('wp', 'reader3', '1 hour') IS NULL"),
	't', 'no new shared lease while an exclusive acquirer waits in fencing_await');
$node->safe_psql('postgres', "SELECT fencing_release('wp', '$reader1')");
$writer->{h}->finish;
cmp_ok(${ $writer->{out} }, '>', $reader2, 'the last shared release hands the lock to the writer');
is($node->safe_psql('postgres', "SELECT fencing_leader('wp')"), 'writer', 'the writer leads');

# 5. An attempt's own lock waits end with the wait, whatever lock_timeout
# the session set: a shared holder renewing inside an open transaction
# keeps its row locked, which an exclusive attempt must lock to judge it.
my $reader = $node->safe_psql('postgres', "SELECT fencing_acquire_shared('bw', 'reader', '1 hour')");
my $renewer = $node->background_psql('postgres');
$renewer->query_safe("BEGIN; SELECT fencing_renew('bw', '$reader', '1 hour')");
my $bounded = start_psql('bounded-writer',
	"SET lock_timeout = '10ms';\nCALL fencing_await('bw', 'writer', '1 hour', '2 s')");
ok( $node->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM pg_stat_activity WHERE application_name = 'bounded-writer'"),
	'fencing_await returns while the blocking transaction is still open');
$bounded->{h}->finish;
is(${ $bounded->{err} }, '', 'with no lock_timeout error') ;
like(${ $bounded->{out} }, qr/\A\s*\z/, 'and a NULL token: the wait ran out');
$renewer->query_safe('COMMIT');
$renewer->quit;

done_testing();
