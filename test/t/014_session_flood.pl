# A flood of expired sessions from one role costs the others nothing
# (1.9, issue 42), on a server that preloads the library (its expiry
# worker running).  Role B, with nothing but PUBLIC's EXECUTE, opens
# 20,000 sessions of 1 microsecond at REPEATABLE READ, where an open does
# not sweep.  Before 1.9 every sweep of expired sessions took one
# lock-manager lock per session in one transaction: every later
# fencing_session_open at READ COMMITTED failed with 53200 (out of shared
# memory), and so did every pass of the expiry worker, which then neither
# marked the leases that ran out nor ended the transactions that outlived
# their leases.  From 1.9 the sweep works in batches of 100, the worker
# ends overdue transactions in a transaction of its own first, and comes
# back 100 ms later while expired sessions remain.  While B's sessions are
# still there, role A:
#
#  - opens a session at READ COMMITTED;
#  - has its plain lease, which runs out with nobody acting on its lock,
#    marked ended = 'expired' by the worker, the expiry announced on
#    fencing_events and counted in fencing_lock_stats;
#  - has its transaction, which wrote under a lease (a lock-wide fence)
#    and sits idle in it past the lease's end, terminated by the worker,
#    which logs the lease that ended it; the next holder of the lock takes
#    it and writes the row A wrote at once, and A's write is not there;
#
# then the worker sweeps every one of B's sessions (A's live one stays),
# and the server log since the flood holds no "out of shared memory" and
# no failed pass of the worker.  Each wait polls with a bound of its own:
# 30 s for each of A's checks, 150 s for the whole sweep (about 25 s
# here).  The flood itself takes 20 to 30 s (0.3 s on 1.8: each open now
# counts the role's sessions against its limit).  Against 1.8 every check
# after the flood fails, except the one that B's sessions are still there
# when A's checks are done, which only makes sure they ran during the
# flood's sweep.

use strict;
use warnings;

use JSON::PP;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

my $node = PostgreSQL::Test::Cluster->new('flood');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'pg_fencing'");
$node->start;

sub sql { return $node->safe_psql('postgres', $_[0]); }

# Polls $query until it answers 't', for at most $seconds.
sub poll_for
{
	my ($seconds, $query) = @_;
	local $PostgreSQL::Test::Utils::timeout_default = $seconds;
	return $node->poll_query_until('postgres', $query);
}

# $sql as $role, logged in as that role: (whether it succeeded, stdout, stderr).
sub as_role
{
	my ($role, $sql) = @_;
	my ($ret, $out, $err) =
	  $node->psql('postgres', $sql, extra_params => [ '-U', $role ], on_error_stop => 1);
	return ($ret == 0 && $err eq '', $out, $err);
}

# A (fl_a) owns fl-expire, which is announced, and fl-lw, under which table
# lw is fenced lock-wide; B (fl_b) is given nothing.
sql(q{
CREATE EXTENSION pg_fencing;
CREATE ROLE fl_a LOGIN;
CREATE ROLE fl_b LOGIN;
SELECT fencing_create_lock('fl-expire', 'fl_a');
SELECT fencing_set_announce('fl-expire', true);
SELECT fencing_create_lock('fl-lw', 'fl_a');
CREATE TABLE lw (id int PRIMARY KEY, v text, tok fencing_token);
INSERT INTO lw VALUES (1, 'initial', NULL);
SELECT fencing_protect('lw', lock_name => 'fl-lw');
GRANT SELECT, UPDATE ON lw TO fl_a;
});

my $b_left = "SELECT count(*) FROM fencing_session WHERE holder_role = 'fl_b'::regrole";
my $log_offset = -s $node->logfile;

# 1. B's flood.
my $start = time;
my ($flooded, $opened, $flood_err) = as_role('fl_b', q{
SET default_transaction_isolation = 'repeatable read';
SELECT count(fencing_session_open('junk', '1 microsecond')) FROM generate_series(1, 20000);
});
ok($flooded && $opened eq '20000', "B opens 20,000 sessions of 1 microsecond at REPEATABLE READ $flood_err");
note sprintf('the flood took %.1f s', time - $start);
my $left_after_flood = sql($b_left);
cmp_ok($left_after_flood, '>', 10000, 'its expired sessions are there (most of them unswept)');
$start = time;

# 2a. A's open at READ COMMITTED.
my ($opens, $a_session, $open_err) = as_role('fl_a', q{
SET default_transaction_isolation = 'read committed';
SELECT fencing_session_open('a-worker', '1 hour');
});
ok($opens && $a_session =~ /^\d+$/, "A's fencing_session_open at READ COMMITTED works $open_err");

# 2b. A's plain lease runs out, and the worker marks, announces and counts
# its expiry.
my $listener = $node->background_psql('postgres');
$listener->query_safe('LISTEN fencing_events');
my ($acquired, $exp_token, $acq_err) =
  as_role('fl_a', "SELECT fencing_acquire('fl-expire', 'a', '1 s')");
ok($acquired && $exp_token =~ /^\d+$/, "A takes a lease of 1 s $acq_err");
ok( poll_for(
		30,
		"SELECT ended = 'expired' FROM fencing_lease WHERE lock_name = 'fl-expire'"),
	"the worker marks A's lease expired once it runs out");
# psql prints the notifications that reached it with its next result.
my @events = map { decode_json($_) }
  $listener->query_safe('SELECT 1') =~ /^Asynchronous notification "fencing_events" with payload "(.*)" received/mg;
$listener->quit;
ok( (grep { $_->{event} eq 'expired' && $_->{lock_name} eq 'fl-expire' && $_->{token} eq $exp_token }
		  @events),
	'... announces the expiry on fencing_events');
is(sql("SELECT expiries FROM fencing_lock_stats WHERE lock_name = 'fl-expire'"),
	'1', '... and counts it');

# 2c. A writes under a lease of 1 s, and stays idle in its transaction past
# the lease's end: the worker terminates it.
my $lw_token;
($acquired, $lw_token, $acq_err) = as_role('fl_a', "SELECT fencing_acquire('fl-lw', 'a', '1 s')");
ok($acquired && $lw_token =~ /^\d+$/, "A takes fl-lw for 1 s $acq_err");
$lw_token = 0 unless $lw_token =~ /^\d+$/;
my $a = $node->background_psql('postgres', extra_params => [ '-U', 'fl_a' ]);
my $a_pid = $a->query_safe('SELECT pg_backend_pid()');
$a->query_safe('BEGIN');
$a->query_safe("UPDATE lw SET v = 'by A', tok = $lw_token WHERE id = 1");
ok(poll_for(30, "SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = $a_pid"),
	"the worker ends A's transaction, idle past the end of the lease it wrote under");
like(
	slurp_file($node->logfile, $log_offset),
	qr/terminating process $a_pid, idle in a transaction that wrote under the lease of fencing lock "fl-lw" under token $lw_token, which ran out/,
	'the server log names the lease that ended it');
my $answered = eval { $a->query('SELECT 1'); 1 };
ok(!$answered || $a->{stderr} =~ /terminating connection|server closed the connection|connection to server was lost/,
	"A's next statement finds its connection gone");
# The next holder takes the lock and writes the row at once: A's
# transaction holds neither the lock's fence gate nor the row any more.
my ($next_wrote, $next_out, $next_err) = as_role('fl_a', q{
SET statement_timeout = '10s';
SELECT fencing_acquire('fl-lw', 'next', '1 min') AS tok \gset
UPDATE lw SET v = 'by the next holder', tok = :tok WHERE id = 1;
});
ok($next_wrote, "the next holder takes fl-lw and writes the row A wrote $next_err");
eval { $a->quit };
is(sql('SELECT v FROM lw WHERE id = 1'), 'by the next holder', "A's write is not in the table, the next holder's is");
my $left_then = sql($b_left);
cmp_ok($left_then, '>', 0, "B's flood was still being swept when A's checks were done ($left_then sessions left)");
note sprintf("A's checks took %.1f s after the flood", time - $start);

# 3. The worker sweeps all of B's sessions; A's live one stays.
ok(poll_for(150, "SELECT ($b_left) = 0"), "the worker sweeps every one of B's expired sessions");
note sprintf('the sweep took %.1f s after the flood', time - $start);
is(sql("SELECT count(*) FROM fencing_session WHERE holder_role = 'fl_a'::regrole"),
	'1', "A's live session is still open");
my $log = slurp_file($node->logfile, $log_offset);
unlike($log, qr/out of shared memory/, 'no "out of shared memory" in the server log');
unlike($log, qr/background worker "pg_fencing expiry worker" \(PID \d+\) exited with exit code [^0]/,
	'no pass of the expiry worker failed');

$node->stop;
done_testing();
