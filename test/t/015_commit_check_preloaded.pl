# The transactions of sql/commit_check.sql, with the library preloaded
# (1.9, issue 42): a transaction writes under a lease, outlives it, and
# then calls what before 1.9 let its COMMIT through -- the close of its
# own session, an open at its role's limit (whose sweep ended that
# session), a new acquire of the same lock, a release.  Preloaded, the expiry worker ends such a
# transaction at its lease's end (the statement running then is
# cancelled); the COMMIT check refuses whatever is left (55Z04).  Either
# way the write must not land, and what is refused must say why.  A live
# holder's last transaction -- write, release while live, COMMIT -- still
# commits, so the test can tell "nothing lands" from "nothing works".

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('commit_check');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'pg_fencing'");
$node->start;
$node->safe_psql(
	'postgres', q{
CREATE EXTENSION pg_fencing;
CREATE TABLE jobs (id int PRIMARY KEY, v text, tok fencing_token);
INSERT INTO jobs VALUES (1, 'initial', NULL);
SELECT fencing_protect('jobs', lock_name => 'job');
SELECT fencing_release('readers', fencing_acquire_shared('readers', 'setup', '1 s'));
CREATE TABLE readings (id int PRIMARY KEY, v text, tok fencing_token);
SELECT fencing_protect('readings', lock_name => 'readers');
});

# Each case: what takes the lease (psql variables :s and :t), and what the
# transaction calls after its lease has ended.
my @cases = (
	[
		'its own session closed after the session ended',
		q{SELECT fencing_session_open('w', '300 ms') AS s \gset
SELECT fencing_session_acquire(:s, 'job') AS t \gset},
		q{SELECT fencing_session_close(:s);},
		'jobs'
	],
	[
		'an open whose sweep ends its session (at its role\'s limit, where an open sweeps)',
		q{SET pg_fencing.max_sessions_per_role = 1;
SELECT fencing_session_open('w', '300 ms') AS s \gset
SELECT fencing_session_acquire(:s, 'job') AS t \gset},
		q{SELECT fencing_session_open('unrelated', '1 min');},
		'jobs'
	],
	[
		'the same lock acquired again',
		q{SELECT fencing_acquire('job', 'a', '300 ms') AS t \gset},
		q{SELECT fencing_acquire('job', 'a', '30 s');},
		'jobs'
	],
	[
		'a release after the end',
		q{SELECT fencing_acquire('job', 'a', '300 ms') AS t \gset},
		q{SELECT fencing_release('job', :'t');},
		'jobs'
	],
	[
		'an exclusive acquire over its ended shared lease',
		q{SELECT fencing_acquire_shared('readers', 'a', '300 ms') AS t \gset},
		q{SELECT fencing_acquire('readers', 'a', '30 s');},
		'readings'
	],);

for my $case (@cases)
{
	my ($name, $take, $after, $table) = @$case;
	my $write =
	  $table eq 'jobs'
	  ? q{UPDATE jobs SET v = 'landed', tok = :'t' WHERE id = 1;}
	  : q{INSERT INTO readings VALUES (1, 'landed', :'t');};
	my ($ret, $out, $err) = $node->psql(
		'postgres', qq{$take
BEGIN;
$write
SELECT pg_sleep(0.5);
$after
COMMIT;
});
	like(
		$err,
		qr/canceling statement|has ended: this transaction wrote under it and cannot commit/,
		"$name: the transaction is ended or its COMMIT refused");
	is($node->safe_psql('postgres', "SELECT count(*) FROM $table WHERE v = 'landed'"),
		'0', "$name: the write did not land");
	$node->safe_psql('postgres',
		"DELETE FROM fencing_session; SELECT fencing_release(lock_name, token) FROM fencing_leases");
}

# The control: released while live, the write commits.
my ($ret, $out, $err) = $node->psql(
	'postgres', q{SELECT fencing_acquire('job', 'a', '30 s') AS t \gset
BEGIN;
UPDATE jobs SET v = 'released while live', tok = :'t' WHERE id = 1;
SELECT fencing_release('job', :'t');
COMMIT;
});
is($ret, 0, 'a release while the lease lives commits') or diag($err);
is($node->safe_psql('postgres', 'SELECT v FROM jobs'),
	'released while live', 'and its write landed');

$node->stop;
done_testing();
