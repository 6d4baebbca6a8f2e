# fencing_grant() across a failover to a streaming standby.
#
# A token the old primary handed out must never be handed out again by a
# standby promoted after the primary crashed -- as long as the token was
# handed out under synchronous replication to that standby.  Like a commit,
# fencing_grant() waits until its WAL has reached the synchronous standbys
# before it returns; when it cannot (standby down, then cancel or
# statement_timeout), it fails with 57014 instead of returning the token.
#
#  1. Sync standby up: grants and guarded writes, crash, promote.  The
#     promoted node grants above every token handed out, and has every
#     acknowledged write.
#  2. Sync standby down: a grant waits and fails (statement_timeout, cancel,
#     terminate) without a token -- also in a session with synchronous_commit
#     off, local or remote_write, and also with the server's logging quieter
#     than the default (log_min_messages and client_min_messages = error,
#     messages in another language where a locale is installed), where
#     PostgreSQL's WARNING about the cancelled wait goes nowhere.  Crash,
#     promote: the promoted node grants above every token handed out.
#     Control: a bare nextval() on a plain sequence in the same window
#     returns at once, and the promoted node repeats its values.
#  3. Asynchronous standby: no wait, and the promoted standby does hand out
#     tokens again (the hazard is real; figures are reported with note()).
#
# The nodes chain: alpha, crashed, fails over to bravo; bravo to charlie;
# charlie to delta.  Each standby's application_name is its node name (set
# with cluster_name), which is what synchronous_standby_names names.
#
# Sequence arithmetic used below: nextval() WAL-logs a sequence on its first
# call after a checkpoint, and then every 32 calls, each record saying "the
# next 32 values are taken".  A standby that replayed the record written when
# value V was handed out resumes, once promoted, at V + 33.  So whatever the
# old primary handed out after that record is at risk, but only from the
# 33rd value on; the tests grant 40 values where they need values past that
# horizon.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use Time::HiRes qw(time usleep);

my $test_start = time;

my $alpha = PostgreSQL::Test::Cluster->new('alpha');
$alpha->init(allows_streaming => 1);
$alpha->append_conf('postgresql.conf', 'max_connections = 20');
$alpha->start;
$alpha->safe_psql('postgres', 'CREATE EXTENSION pg_fencing');

# A streaming standby of $primary named $name, started.  Its conf comes from
# a backup of $primary's, taken before $primary names any synchronous standby,
# so the standby, once promoted, names none either.
sub new_standby
{
	my ($primary, $name) = @_;
	$primary->backup("for_$name");
	my $standby = PostgreSQL::Test::Cluster->new($name);
	$standby->init_from_backup($primary, "for_$name", has_streaming => 1);
	$standby->append_conf('postgresql.conf', "cluster_name = '$name'");
	$standby->start;
	return $standby;
}

# Waits until $primary's walsender for $standby is streaming with sync_state
# $state ('sync' or 'async').
sub wait_for_sync_state
{
	my ($primary, $standby, $state) = @_;
	my $name = $standby->name;
	$primary->poll_query_until('postgres',
		"SELECT sync_state = '$state' AND state = 'streaming' FROM pg_stat_replication WHERE application_name = '$name'"
	) or die "$name never became a $state standby";
	return;
}

# The primary crashes (immediate shutdown: no shutdown checkpoint, and the
# walsenders send nothing more); a stopped $standby is started only then, so
# it cannot fetch anything it missed, and it is promoted.
sub fail_over
{
	my ($primary, $standby, %params) = @_;
	$primary->stop('immediate');
	$standby->start if $params{standby_stopped};
	$standby->promote;
	$standby->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
	  or die $standby->name . ' was not promoted';
	return;
}

# Runs $sql in background session $session; returns its stdout, stderr
# and how long it took.  (BackgroundPsql keeps stderr across queries.)
sub run_in
{
	my ($session, $sql) = @_;
	my $start = time;
	my ($out) = $session->query($sql);
	my $secs = time - $start;
	my $err = $session->{stderr};
	$session->{stderr} = '';
	return ($out, $err, $secs);
}

sub max_of
{
	my $max;
	for (@_) { $max = $_ if !defined($max) || $_ > $max }
	return $max;
}

sub lines { return grep { $_ ne '' } split /\n/, $_[0] // '' }

# Every token returned to a client while a synchronous standby was
# configured, whatever the session's synchronous_commit: the promoted node
# must grant above all of them.
my @handed_out;

my $canceled_error =
  qr/ERROR:  57014: fencing_grant\(\) canceled while waiting for synchronous replication/;
# The same, with the severity in whatever language lc_messages picks.
my $canceled_any_language =
  qr/:  57014: fencing_grant\(\) canceled while waiting for synchronous replication/;

###############################################################################
# 1. Synchronous standby up: grants and guarded writes, crash, promote.
###############################################################################

my $part_start = time;
my $bravo = new_standby($alpha, 'bravo');
$alpha->append_conf('postgresql.conf', "synchronous_standby_names = 'bravo'");
$alpha->reload;
wait_for_sync_state($alpha, $bravo, 'sync');

$alpha->safe_psql(
	'postgres', q{
CREATE TABLE resource (id int PRIMARY KEY, token fencing_token, val text);
INSERT INTO resource SELECT i, NULL, 'initial' FROM generate_series(1, 3) i;
SELECT fencing_protect('resource');
});

# Acknowledged writes: each with a fresh token, each committed.
my $writer = $alpha->background_psql('postgres');
my %expected = map { $_ => [ '', 'initial' ] } 1 .. 3;
for my $i (1 .. 12)
{
	my $id = $i % 3 + 1;
	my $token = $writer->query_safe('SELECT fencing_grant()');
	push @handed_out, $token;
	$writer->query_safe(
		"UPDATE resource SET token = $token, val = 'write $i' WHERE id = $id");
	$expected{$id} = [ $token, "write $i" ];
}
# A CHECKPOINT makes the next grant WAL-log the sequence again, then tokens
# that are handed out but never committed: a write in progress at the crash,
# and grants in a transaction that rolled back.
$writer->query_safe('CHECKPOINT');
$writer->query_safe('BEGIN');
my $in_flight = $writer->query_safe('SELECT fencing_grant()');
push @handed_out, $in_flight;
$writer->query_safe(
	"UPDATE resource SET token = $in_flight, val = 'in flight' WHERE id = 1");
my $other = $alpha->background_psql('postgres');
$other->query_safe('BEGIN');
push @handed_out,
  lines($other->query_safe('SELECT fencing_grant() FROM generate_series(1, 3)'));
$other->query_safe('ROLLBACK');
$other->quit;

my $max_alpha = max_of(@handed_out);
fail_over($alpha, $bravo);
$writer->quit;    # \q needs no server

is( $bravo->safe_psql('postgres',
		"SELECT string_agg(id || ':' || coalesce(token::text, '') || ':' || val, ',' ORDER BY id) FROM resource"
	),
	join(',', map { "$_:$expected{$_}[0]:$expected{$_}[1]" } 1 .. 3),
	'sync standby promoted: every acknowledged guarded write is there, the unacknowledged one is not'
);
my $first_bravo = $bravo->safe_psql('postgres', 'SELECT fencing_grant()');
cmp_ok($first_bravo, '>', $max_alpha,
	"sync standby promoted: its first grant ($first_bravo) is above every token handed out before ($max_alpha)"
);
push @handed_out, $first_bravo;
$bravo->safe_psql('postgres',
	"UPDATE resource SET token = $first_bravo, val = 'after failover' WHERE id = 1");
my ($rc, $stdout, $stderr) = $bravo->psql('postgres',
	"UPDATE resource SET token = $in_flight, val = 'stale' WHERE id = 1");
like($stderr, qr/stale fencing token $in_flight/,
	'on the promoted node, a write with a token from before the failover is fenced off');
note sprintf('part 1 (sync standby up): %.1f s', time - $part_start);

###############################################################################
# 2. Synchronous standby down: grants wait and fail; control with nextval().
###############################################################################

$part_start = time;
my $charlie = new_standby($bravo, 'charlie');
$bravo->append_conf('postgresql.conf', "synchronous_standby_names = 'charlie'");
$bravo->reload;
wait_for_sync_state($bravo, $charlie, 'sync');
$bravo->safe_psql('postgres', 'CREATE SEQUENCE plain_seq CACHE 1');

# With charlie up: a checkpoint, so that the next grant and the next nextval
# WAL-log their sequences; they reach charlie (it confirms the grant, and we
# wait for it to replay both).  Charlie will resume at these values + 33.
$bravo->safe_psql('postgres', 'CHECKPOINT');
my $last_confirmed = $bravo->safe_psql('postgres', 'SELECT fencing_grant()');
push @handed_out, $last_confirmed;
my $plain_confirmed =
  $bravo->safe_psql('postgres', "SELECT nextval('plain_seq')");
$bravo->wait_for_catchup($charlie);
$charlie->stop;

# Another checkpoint, with charlie down: the next grant writes a new record,
# which charlie does not have (without it, the next 32 grants would need
# nothing charlie has not confirmed already, and would not wait).
$bravo->safe_psql('postgres', 'CHECKPOINT');

# 2a. statement_timeout in a transaction: the grant waits for charlie, fails
# with 57014 after the timeout, and returns no token; the transaction rolls
# back.
my $session = $bravo->background_psql('postgres', on_error_stop => 0);
$session->query_safe('\set VERBOSITY verbose');
$session->query_safe('BEGIN');
$session->query_safe("SET statement_timeout = '2s'");
my ($out, $err, $secs) =
  run_in($session, 'SELECT fencing_grant() FROM generate_series(1, 40)');
push @handed_out, lines($out);
is($out, '', 'sync standby down: statement_timeout: the grant returns no token');
like($err, $canceled_error,
	'sync standby down: statement_timeout: the grant fails with 57014');
unlike($err, qr/committed locally|wait for synchronous replication/,
	"sync standby down: PostgreSQL's commit-wait warning does not reach the client");
cmp_ok($secs, '>=', 1.9,
	sprintf('sync standby down: the grant waited for the timeout (%.2f s)', $secs));
$session->query_safe('ROLLBACK');
note sprintf('statement_timeout 2s: the grant failed after %.2f s:%s', $secs, "\n$err");

# 2b. A cancel from another session ends the wait the same way.
$session->query_safe('RESET statement_timeout');
my $pid = $session->query_safe('SELECT pg_backend_pid()');
$session->query_until(qr/waiting/,
	"\\echo waiting\nSELECT fencing_grant() AS cancel_me;\n");
my $state;
my $deadline = time + $PostgreSQL::Test::Utils::timeout_default;
while (time < $deadline)
{
	$state = $bravo->safe_psql('postgres',
		"SELECT CASE WHEN wait_event = 'SyncRep' THEN 'waiting' WHEN state = 'idle' AND query LIKE '%cancel_me%' THEN 'done' END FROM pg_stat_activity WHERE pid = $pid"
	);
	last if $state ne '';
	usleep(20_000);
}
is($state, 'waiting',
	'sync standby down: the grant waits for the standby (wait event SyncRep)');
$bravo->safe_psql('postgres', "SELECT pg_cancel_backend($pid)")
  if $state eq 'waiting';
($out, $err) = run_in($session, "SELECT 'after cancel'");
push @handed_out, grep { $_ ne 'after cancel' } lines($out);
is($out, 'after cancel', 'sync standby down: cancel: the grant returns no token');
like($err, $canceled_error, 'sync standby down: cancel: the grant fails with 57014');

# 2c. synchronous_commit = off, local or remote_write in the granting
# session: unlike a commit, a grant waits all the same, for remote flush (the
# token leaves the database at once), and fails the same way.  With off, 40
# grants in one statement: the first one waits and fails.
for my $level ('off', 'local', 'remote_write')
{
	$session->query_safe("SET synchronous_commit = $level");
	$session->query_safe("SET statement_timeout = '500ms'");
	($out, $err, $secs) = run_in($session,
		'SELECT fencing_grant() FROM generate_series(1, ' . ($level eq 'off' ? 40 : 1) . ')');
	push @handed_out, lines($out);
	is($out, '', "synchronous_commit = $level, sync standby down: the grant returns no token");
	like($err, $canceled_error,
		"synchronous_commit = $level, sync standby down: the grant fails with 57014");
	cmp_ok($secs, '>=', 0.45,
		sprintf('synchronous_commit = %s: the grant waited for the timeout (%.2f s)', $level, $secs));
}
$session->quit;

# 2d. Logging quieter than the default: PostgreSQL's WARNING about the
# cancelled wait goes neither to the server log nor to the client, and
# messages are in another language if a locale for one is installed.  Each
# grant in its own statement, so that each gets its own statement_timeout:
# 40 of them, past what charlie has (see the top), half of them with
# synchronous_commit = off.
my ($locale) = grep { /^(de_DE|fr_FR|es_ES)\.utf-?8$/i } split /\n/, `locale -a 2>/dev/null`;
note defined $locale
  ? "quiet logging: lc_messages = '$locale'"
  : 'quiet logging: no de_DE, fr_FR or es_ES locale installed, lc_messages stays as it is';
$bravo->append_conf('postgresql.conf',
	"log_min_messages = error\nclient_min_messages = error\n"
	  . (defined $locale ? "lc_messages = '$locale'\n" : ''));
$bravo->reload;
$bravo->poll_query_until('postgres', 'SHOW log_min_messages', 'error')
  or die 'log_min_messages = error never took effect';
my $log_offset = -s $bravo->logfile;
my $quiet = $bravo->background_psql('postgres', on_error_stop => 0);
$quiet->query_safe('\set VERBOSITY verbose');
$quiet->query_safe("SET statement_timeout = '200ms'");
my ($quiet_tokens, $quiet_failed, $quiet_other) = (0, 0, '');
for my $i (1 .. 40)
{
	$quiet->query_safe('SET synchronous_commit = off') if $i == 21;
	($out, $err) = run_in($quiet, 'SELECT fencing_grant()');
	push @handed_out, lines($out);
	$quiet_tokens += lines($out);
	if ($err =~ $canceled_any_language) { $quiet_failed++ }
	else { $quiet_other .= $err }
}
is($quiet_tokens, 0, 'quiet logging, sync standby down: 40 grants return no token');
is($quiet_failed, 40, 'quiet logging, sync standby down: 40 grants fail with 57014');
is($quiet_other, '', 'quiet logging: no other message reaches the client');
ok($bravo->log_contains(qr/fencing_grant\(\) canceled while waiting/, $log_offset),
	'quiet logging: the server log has the grant\'s ERROR');
ok(!$bravo->log_contains(qr/canceling wait for synchronous replication/, $log_offset),
	"quiet logging: the server log does not have PostgreSQL's WARNING about the cancelled wait");

# 2e. A terminate during the wait ends the backend, and no token is sent.
my ($term_out, $term_err) = ('', '');
my $term = IPC::Run::start(
	[ 'psql', '-XAtq', '-d', $bravo->connstr('postgres'), '-c', 'SELECT fencing_grant() AS terminate_me' ],
	'>', \$term_out, '2>', \$term_err);
$bravo->poll_query_until('postgres',
	"SELECT count(*) = 1 FROM pg_stat_activity WHERE wait_event = 'SyncRep' AND query LIKE '%terminate_me%' AND pid <> pg_backend_pid()"
) or die 'the grant to terminate never waited';
$bravo->safe_psql('postgres',
	"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE wait_event = 'SyncRep' AND query LIKE '%terminate_me%' AND pid <> pg_backend_pid()"
);
$term->finish;
push @handed_out, lines($term_out);
is($term_out, '', 'sync standby down: terminate: the grant returns no token');
note "terminate during the wait: psql said: $term_err";
$quiet->quit;

# Control: nextval() on a plain CACHE 1 sequence, in a transaction that rolls
# back, with charlie down: returns at once, never waits for the standby.
my $control = $bravo->background_psql('postgres');
$control->query_safe('BEGIN');
my @plain = lines(
	$control->query_safe(
		"SELECT nextval('plain_seq') FROM generate_series(1, 40)"));
$control->query_safe('ROLLBACK');
$control->quit;
is(scalar(@plain), 40, 'control: nextval() returns at once with the sync standby down');

my $max_bravo = max_of(@handed_out);
fail_over($bravo, $charlie, standby_stopped => 1);

my $first_charlie = $charlie->safe_psql('postgres', 'SELECT fencing_grant()');
cmp_ok($first_charlie, '>', $max_bravo,
	"sync standby down, crash, promote: the first grant ($first_charlie) is above every token handed out before ($max_bravo)"
);
my $plain_charlie =
  $charlie->safe_psql('postgres', "SELECT nextval('plain_seq')");
my $max_plain = max_of(@plain);
cmp_ok($plain_charlie, '<=', $max_plain,
	"control: the promoted node's nextval() ($plain_charlie) repeats a value handed out before (up to $max_plain)"
);
note "part 2: last token charlie confirmed $last_confirmed, its first grant "
  . "after promotion $first_charlie; plain_seq: confirmed $plain_confirmed, "
  . "handed out $plain[0] .. $max_plain, promoted node's nextval $plain_charlie";
note sprintf('part 2 (sync standby down): %.1f s', time - $part_start);

###############################################################################
# 3. Asynchronous standby: grants do not wait, and from 1.5 on tokens do not
#    repeat either: the promoted standby's first grant is anchored to the
#    clock (src/core/token_clock.hpp), above every token the old primary
#    handed out.  Release 1.4 granted again from the last token the standby
#    received (plus the sequence's log-ahead).
###############################################################################

$part_start = time;
# Two databases, two token sequences, one failover: "many" grants 40 tokens
# while delta is down, "few" grants 5.
$charlie->safe_psql('postgres', 'CREATE DATABASE few');
$charlie->safe_psql('few', 'CREATE EXTENSION pg_fencing');
my $delta = new_standby($charlie, 'delta');
wait_for_sync_state($charlie, $delta, 'async');

$charlie->safe_psql('postgres', 'CREATE SEQUENCE async_plain CACHE 1');
$charlie->safe_psql('postgres', "SELECT nextval('async_plain')");
$charlie->safe_psql('postgres', 'CHECKPOINT');
my %replicated = map { $_ => $charlie->safe_psql($_, 'SELECT fencing_grant()') }
  ('postgres', 'few');
$charlie->wait_for_catchup($delta);
$delta->stop;
$charlie->safe_psql('postgres', 'CHECKPOINT');

my %granted;
for my $db ('postgres', 'few')
{
	my $count = $db eq 'few' ? 5 : 40;
	my $start = time;
	$granted{$db} = [
		lines(
			$charlie->safe_psql(
				$db,
				"SET statement_timeout = '2s'; SELECT fencing_grant() FROM generate_series(1, $count)"
			))
	];
	is(scalar(@{ $granted{$db} }), $count,
		sprintf('async standby down: %d grants in %s return at once (%.2f s)',
			$count, $db, time - $start));
}

# Control: a plain sequence, used the same way, repeats values on the
# promoted standby (what fencing_grant() did before 1.5).
my @async_plain = lines(
	$charlie->safe_psql('postgres',
		"SELECT nextval('async_plain') FROM generate_series(1, 40)"));

fail_over($charlie, $delta, standby_stopped => 1);

my $async_plain_after =
  $delta->safe_psql('postgres', "SELECT nextval('async_plain')");
cmp_ok($async_plain_after, '<=', max_of(@async_plain),
	"control: the promoted async standby's nextval() ($async_plain_after) repeats a value handed out before (up to "
	  . max_of(@async_plain) . ')');

my %after =
  map { $_ => $delta->safe_psql($_, 'SELECT fencing_grant()') } ('postgres', 'few');
for my $db ('postgres', 'few')
{
	my @g = @{ $granted{$db} };
	my $max = max_of(@g);
	cmp_ok($after{$db}, '>', $max,
		"async standby, database $db: after "
		  . scalar(@g)
		  . " unreplicated grants ($g[0] .. $max; last replicated $replicated{$db}), "
		  . "the promoted standby's first grant ($after{$db}) is above them all");
}
note sprintf('part 3 (async standby): %.1f s', time - $part_start);
note sprintf('total: %.1f s', time - $test_start);

$delta->stop;
done_testing();
