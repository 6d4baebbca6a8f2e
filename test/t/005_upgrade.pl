# Upgrading from 1.0 must give exactly what a fresh install of the current
# version gives, and must keep the data of a database that used 1.0.
#
#  - database "upgraded": CREATE EXTENSION pg_fencing VERSION '1.0', used a
#    little (token grants, a lease, a per-row and a lock-wide protected
#    table), then ALTER EXTENSION pg_fencing UPDATE;
#  - database "fresh": CREATE EXTENSION pg_fencing.
#
# Every object the extension owns (pg_depend deptype 'e'), with its
# definition, properties, privileges, comments and dependencies, and the
# extension's own row (version, dumped tables and their conditions), must be
# the same in both.  The two are independent: the fresh install runs the
# full install script of the current version (pg_fencing--1.10.sql, the
# readable definition of the interface), the upgraded database 1.0 and every
# upgrade script, so a change made to one and not the other fails here.
# Because an omission in both would pass, the test also checks, in both,
# the rules every version must keep (each user-facing object has a comment;
# fencing_unprotect is there, pinned and documented).  The extension lives
# in a schema of its own here, so a missing @extschema@ would show.
#
# 1.2 makes every lock name a row of fencing_lock with an owner and the
# roles granted its use.  The upgraded database is used before the update
# by roles that are not superusers -- app_owner owns a table guarded under
# lock 'tenant-7', app_writer may UPDATE it and writes under the lock,
# app_leaser holds a lease on lock 'jobs' -- and by a superuser who only
# presented a token for lock 'presented'.  After the update each lock has
# the owner and users the upgrade script's comment promises, and each of
# those roles carries on without a new step, while a role that never used
# the locks cannot use them.  The library installed is the current one
# throughout: the use before the update also checks that it still serves a
# database whose extension has not been updated yet.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('upgrade');
$node->init;
$node->start;

# Roles that are not superusers; each logs in as itself, so that
# session_user (which a lease records) is the role.
$node->safe_psql(
	'postgres', q{
CREATE ROLE app_owner LOGIN;
CREATE ROLE app_writer LOGIN;
CREATE ROLE app_leaser LOGIN;
CREATE ROLE app_late LOGIN;
});
my $superuser = $node->safe_psql('postgres', 'SELECT current_user');

# psql with the extension's schema on the path, stopping at the first error.
sub sql
{
	my ($db, $query) = @_;
	return $node->safe_psql($db, "SET search_path = public, fencing;\n$query");
}

# The same, logged in as $role.
sub sql_as
{
	my ($db, $role, $query) = @_;
	return $node->safe_psql($db, "SET search_path = public, fencing;\n$query",
		extra_params => [ '-U', $role ]);
}

# Runs $query as $role, which must succeed: a test named $name, with the
# error as a diagnostic, and on we go (a failure here need not stop the
# checks that follow).  Returns the output.
sub ok_as
{
	my ($db, $role, $query, $name) = @_;
	my ($ret, $out, $err) = $node->psql($db,
		"\\set VERBOSITY verbose\nSET search_path = public, fencing;\n$query",
		extra_params => [ '-U', $role, '-v', 'ON_ERROR_STOP=1' ]);
	is($ret, 0, $name) or diag $err;
	return $out;
}

# Runs $query as $role, which must fail; returns its error, with SQLSTATE.
sub error_as
{
	my ($db, $role, $query) = @_;
	my ($ret, $out, $err) = $node->psql($db,
		"\\set VERBOSITY verbose\nSET search_path = public, fencing;\n$query",
		extra_params => [ '-U', $role, '-v', 'ON_ERROR_STOP=1' ]);
	isnt($ret, 0, "fails as $role: $query");
	return $err;
}

# Runs $query, which must fail; returns its error message, with SQLSTATE.
sub sql_error
{
	my ($db, $query) = @_;
	my ($ret, $out, $err) = $node->psql($db,
		"\\set VERBOSITY verbose\nSET search_path = public, fencing;\n$query");
	isnt($ret, 0, "fails: $query");
	return $err;
}

my $last_version = $node->safe_psql('postgres',
	"SELECT default_version FROM pg_available_extensions WHERE name = 'pg_fencing'"
);
is($last_version, '1.10', 'the default version is 1.10');

###############################################################################
# Database "upgraded": 1.0, in use, then updated.
###############################################################################
$node->safe_psql('postgres', 'CREATE DATABASE upgraded');
$node->safe_psql('upgraded',
	"CREATE SCHEMA fencing; CREATE EXTENSION pg_fencing SCHEMA fencing VERSION '1.0'"
);
is( $node->safe_psql(
		'upgraded',
		"SELECT extversion FROM pg_extension WHERE extname = 'pg_fencing'"),
	'1.0',
	'created at 1.0');
is( $node->safe_psql(
		'upgraded',
		"SELECT count(*) FROM pg_proc WHERE proname = 'fencing_unprotect'"),
	'0',
	'1.0 has no fencing_unprotect');

sql(
	'upgraded', q{
CREATE TABLE resource (id int PRIMARY KEY, token fencing_token, val text);
INSERT INTO resource VALUES (1, NULL, 'initial');
SELECT fencing_protect('resource');
CREATE TABLE ledger (id int PRIMARY KEY, token fencing_token, entry text);
SELECT fencing_protect('ledger', lock_name => 'tenant-7');
CREATE TABLE parted (id int, token fencing_token) PARTITION BY RANGE (id);
CREATE TABLE parted_1 PARTITION OF parted FOR VALUES FROM (0) TO (10);
SELECT fencing_protect('parted', lock_name => 'tenant-7');
SELECT fencing_grant() FROM generate_series(1, 5);
-- Every table guarded under 'tenant-7' belongs to app_owner.
ALTER TABLE ledger OWNER TO app_owner;
ALTER TABLE parted OWNER TO app_owner;
ALTER TABLE parted_1 OWNER TO app_owner;
GRANT USAGE ON SCHEMA fencing TO app_owner, app_writer, app_leaser, app_late;
GRANT CREATE ON SCHEMA public TO app_owner;
});
# app_owner's own table under 'tenant-7', which app_writer may update.
sql_as(
	'upgraded', 'app_owner', q{
CREATE TABLE accounts (id int PRIMARY KEY, token fencing_token, balance int);
INSERT INTO accounts VALUES (1, NULL, 100);
SELECT fencing_protect('accounts', lock_name => 'tenant-7');
GRANT SELECT, UPDATE ON accounts TO app_writer;
});
my $jobs_token = sql_as('upgraded', 'app_leaser',
	"SELECT fencing_acquire('jobs', 'leaser-1', '1 hour')");
like($jobs_token, qr/^\d+$/,
	"app_leaser holds a lease on 'jobs' under 1.0 (token $jobs_token)");
my $lease_token = sql('upgraded',
	"SELECT fencing_acquire('nightly', 'worker-1', '1 hour')");
like($lease_token, qr/^\d+$/, "a lease under 1.0 (token $lease_token)");
my $row_token = sql('upgraded', 'SELECT fencing_grant()');
sql('upgraded',
	"UPDATE resource SET token = $row_token, val = 'by $row_token' WHERE id = 1"
);
# The library installed is the current one: it must still serve a
# database whose extension is at 1.0 (lock-wide writes, fencing_present).
ok_as('upgraded', $superuser,
	"INSERT INTO ledger VALUES (1, $row_token, 'entry by $row_token')",
	'before the update: a write under a lock-wide fence');
ok_as('upgraded', 'app_writer',
	"UPDATE accounts SET token = $row_token, balance = 90 WHERE id = 1",
	"before the update: app_writer writes under 'tenant-7'");
# A lock whose only trace is a mark, made by a presentation.
ok_as('upgraded', $superuser,
	"BEGIN; SELECT fencing_present('presented', '$row_token'); COMMIT;",
	"before the update: fencing_present() for lock 'presented'");
like(
	sql_error(
		'upgraded',
		"UPDATE resource SET token = $lease_token, val = 'stale' WHERE id = 1"),
	qr/55Z01/,
	'1.0 guard refuses a stale token');
my $max_token = sql('upgraded', 'SELECT last_value FROM fencing_token_seq');

$node->safe_psql('upgraded', 'ALTER EXTENSION pg_fencing UPDATE');
is( $node->safe_psql(
		'upgraded',
		"SELECT extversion FROM pg_extension WHERE extname = 'pg_fencing'"),
	$last_version,
	"ALTER EXTENSION pg_fencing UPDATE reaches $last_version");

# Each lock name in use became a lock (pg_fencing--1.1--1.2.sql, "The locks
# of a 1.1 database"): owned by the owner of a table guarded under it, else
# by the role holding its lease, else by the role that ran the update; the
# other roles that used it, and the roles with a write privilege on a table
# guarded under it, are granted its use.
is( sql(
		'upgraded',
		"SELECT string_agg(concat_ws(' ', lock_name, owner, users), E'\\n' ORDER BY lock_name) FROM fencing_lock"
	),
	join("\n",
		'jobs app_leaser {}',
		"nightly $superuser {}",
		"presented $superuser {}",
		'tenant-7 app_owner {app_writer}'),
	'after the update: each lock with its owner and users');
is( sql('upgraded',
		'SELECT count(DISTINCT lock_id) = count(*) FROM fencing_lock'),
	't', 'each lock has a lock_id of its own');

###############################################################################
# Database "fresh": the current version, directly.
###############################################################################
$node->safe_psql('postgres', 'CREATE DATABASE fresh');
$node->safe_psql('fresh',
	'CREATE SCHEMA fencing; CREATE EXTENSION pg_fencing SCHEMA fencing');
is( $node->safe_psql(
		'fresh',
		"SELECT extversion FROM pg_extension WHERE extname = 'pg_fencing'"),
	$last_version,
	"CREATE EXTENSION installs $last_version");
# ... from the full install script: PostgreSQL runs a version's own script
# when there is one, rather than 1.0 and the upgrades.
my $sharedir = $node->config_data('--sharedir');
ok(-f "$sharedir/extension/pg_fencing--$last_version.sql",
	"a full install script for $last_version is installed, so the two databases took independent paths");

###############################################################################
# The same catalog objects in both.
###############################################################################
# One line per object the extension owns: its identity, its description and
# whatever defines it, with OIDs spelled as names (they differ between
# databases).  Plus the extension's own row and initial privileges.
my $catalog_query = <<'EOSQL';
WITH ext AS (
  SELECT e.* FROM pg_catalog.pg_extension e WHERE e.extname = 'pg_fencing'
), member AS (
  SELECT d.classid, d.objid, d.objsubid
    FROM pg_catalog.pg_depend d, ext
   WHERE d.refclassid = 'pg_catalog.pg_extension'::regclass
     AND d.refobjid = ext.oid AND d.deptype = 'e'
), described AS (
  SELECT i.type, i.identity, pg_catalog.pg_describe_object(m.classid, m.objid, m.objsubid) AS description,
  CASE m.classid
  WHEN 'pg_catalog.pg_proc'::regclass THEN (
    SELECT concat_ws(' ; ',
      'kind=' || p.prokind::text, 'lang=' || l.lanname, 'owner=' || p.proowner::regrole,
      'secdef=' || p.prosecdef, 'volatile=' || p.provolatile::text, 'parallel=' || p.proparallel::text,
      'leakproof=' || p.proleakproof, 'strict=' || p.proisstrict, 'retset=' || p.proretset,
      'cost=' || p.procost, 'rows=' || p.prorows,
      'config=' || coalesce(p.proconfig::text, '-'),
      'acl=' || coalesce(p.proacl::text, 'default'),
      'args=' || pg_catalog.pg_get_function_arguments(p.oid),
      'result=' || pg_catalog.pg_get_function_result(p.oid),
      CASE WHEN p.prokind = 'a' THEN (
        SELECT concat_ws(' ; ', 'aggkind=' || a.aggkind::text, 'transfn=' || a.aggtransfn::regprocedure,
               'finalfn=' || a.aggfinalfn::regprocedure, 'combinefn=' || a.aggcombinefn::regprocedure,
               'sortop=' || a.aggsortop::regoperator, 'transtype=' || a.aggtranstype::regtype,
               'initval=' || coalesce(a.agginitval, '-'),
               'serialfn=' || a.aggserialfn::regprocedure, 'deserialfn=' || a.aggdeserialfn::regprocedure,
               'mtransfn=' || a.aggmtransfn::regprocedure, 'minvtransfn=' || a.aggminvtransfn::regprocedure,
               'mfinalfn=' || a.aggmfinalfn::regprocedure, 'mtranstype=' || a.aggmtranstype::regtype,
               'minitval=' || coalesce(a.aggminitval, '-'), 'finalextra=' || a.aggfinalextra,
               'finalmodify=' || a.aggfinalmodify::text, 'transspace=' || a.aggtransspace,
               'numdirectargs=' || a.aggnumdirectargs)
          FROM pg_catalog.pg_aggregate a WHERE a.aggfnoid = p.oid)
      ELSE 'def=' || pg_catalog.pg_get_functiondef(p.oid) END)
      FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_language l ON l.oid = p.prolang
     WHERE p.oid = m.objid)
  WHEN 'pg_catalog.pg_class'::regclass THEN (
    SELECT concat_ws(' ; ',
      'kind=' || c.relkind::text, 'persistence=' || c.relpersistence::text, 'owner=' || c.relowner::regrole,
      'acl=' || coalesce(c.relacl::text, 'default'),
      'options=' || coalesce(c.reloptions::text, '-'), 'replident=' || c.relreplident::text,
      'am=' || coalesce((SELECT am.amname FROM pg_catalog.pg_am am WHERE am.oid = c.relam)::text, '-'),
      'rowsecurity=' || c.relrowsecurity || '/' || c.relforcerowsecurity,
      'policies=' || (SELECT string_agg(concat_ws(' ', pg_catalog.quote_ident(po.polname), po.polcmd::text, po.polpermissive,
                                                  po.polroles::regrole[]::text,
                                                  pg_catalog.pg_get_expr(po.polqual, po.polrelid),
                                                  pg_catalog.pg_get_expr(po.polwithcheck, po.polrelid)), ', ' ORDER BY po.polname)
                        FROM pg_catalog.pg_policy po WHERE po.polrelid = c.oid),
      'inherits=' || (SELECT string_agg(i.inhparent::regclass::text, ', ' ORDER BY i.inhseqno)
                        FROM pg_catalog.pg_inherits i WHERE i.inhrelid = c.oid),
      'part comments=' || (SELECT string_agg(pg_catalog.pg_describe_object(ds.classoid, ds.objoid, 0) || ': ' || ds.description,
                                             ', ' ORDER BY 1)
                             FROM pg_catalog.pg_description ds
                            WHERE (ds.classoid = 'pg_catalog.pg_constraint'::regclass
                                   AND ds.objoid IN (SELECT co.oid FROM pg_catalog.pg_constraint co WHERE co.conrelid = c.oid))
                               OR (ds.classoid = 'pg_catalog.pg_trigger'::regclass
                                   AND ds.objoid IN (SELECT tg.oid FROM pg_catalog.pg_trigger tg WHERE tg.tgrelid = c.oid))
                               OR (ds.classoid = 'pg_catalog.pg_policy'::regclass
                                   AND ds.objoid IN (SELECT po.oid FROM pg_catalog.pg_policy po WHERE po.polrelid = c.oid))
                               OR (ds.classoid = 'pg_catalog.pg_class'::regclass
                                   AND ds.objoid IN (SELECT ix.indexrelid FROM pg_catalog.pg_index ix WHERE ix.indrelid = c.oid))),
      'columns=' || (SELECT string_agg(concat_ws(' ', pg_catalog.quote_ident(a.attname),
                                 pg_catalog.format_type(a.atttypid, a.atttypmod),
                                 CASE WHEN a.attnotnull THEN 'NOT NULL' END,
                                 'default ' || pg_catalog.pg_get_expr(ad.adbin, ad.adrelid),
                                 'collation ' || a.attcollation::regcollation,
                                 'acl ' || a.attacl::text,
                                 'identity ' || nullif(a.attidentity::text, ''),
                                 'generated ' || nullif(a.attgenerated::text, ''),
                                 'storage ' || a.attstorage::text,
                                 'compression ' || nullif(a.attcompression::text, ''),
                                 'stattarget ' || nullif(a.attstattarget, -1)), ', ' ORDER BY a.attnum)
                       FROM pg_catalog.pg_attribute a
                       LEFT JOIN pg_catalog.pg_attrdef ad ON ad.adrelid = a.attrelid AND ad.adnum = a.attnum
                      WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped),
      'constraints=' || (SELECT string_agg(co.conname || ' ' || pg_catalog.pg_get_constraintdef(co.oid), ', '
                                           ORDER BY co.conname)
                           FROM pg_catalog.pg_constraint co WHERE co.conrelid = c.oid),
      'indexes=' || (SELECT string_agg(pg_catalog.pg_get_indexdef(x.indexrelid), ', '
                                       ORDER BY x.indexrelid::regclass::text)
                       FROM pg_catalog.pg_index x WHERE x.indrelid = c.oid),
      'triggers=' || (SELECT string_agg(pg_catalog.pg_get_triggerdef(t.oid), ', ' ORDER BY t.tgname)
                        FROM pg_catalog.pg_trigger t WHERE t.tgrelid = c.oid),
      'view=' || CASE WHEN c.relkind = 'v' THEN pg_catalog.pg_get_viewdef(c.oid) END,
      'sequence=' || (SELECT concat_ws(' ', s.seqtypid::regtype, s.seqstart, s.seqincrement,
                                       s.seqmax, s.seqmin, s.seqcache, s.seqcycle)
                        FROM pg_catalog.pg_sequence s WHERE s.seqrelid = c.oid))
      FROM pg_catalog.pg_class c WHERE c.oid = m.objid)
  WHEN 'pg_catalog.pg_type'::regclass THEN (
    SELECT concat_ws(' ; ',
      'typtype=' || t.typtype::text, 'len=' || t.typlen, 'byval=' || t.typbyval, 'align=' || t.typalign::text,
      'storage=' || t.typstorage::text, 'category=' || t.typcategory::text, 'preferred=' || t.typispreferred,
      'input=' || t.typinput::regprocedure, 'output=' || t.typoutput::regprocedure,
      'receive=' || t.typreceive::regprocedure, 'send=' || t.typsend::regprocedure,
      'modin=' || t.typmodin::regprocedure, 'modout=' || t.typmodout::regprocedure,
      'analyze=' || t.typanalyze::regprocedure, 'elem=' || t.typelem::regtype,
      'array=' || t.typarray::regtype, 'basetype=' || t.typbasetype::regtype,
      'notnull=' || t.typnotnull, 'default=' || coalesce(t.typdefault, '-'),
      'owner=' || t.typowner::regrole, 'acl=' || coalesce(t.typacl::text, 'default'),
      'delim=' || t.typdelim::text, 'collation=' || t.typcollation::regcollation,
      'subscript=' || t.typsubscript::regprocedure, 'typmod=' || t.typtypmod, 'ndims=' || t.typndims)
      FROM pg_catalog.pg_type t WHERE t.oid = m.objid)
  WHEN 'pg_catalog.pg_operator'::regclass THEN (
    SELECT concat_ws(' ; ',
      'left=' || o.oprleft::regtype, 'right=' || o.oprright::regtype,
      'result=' || o.oprresult::regtype, 'code=' || o.oprcode::regprocedure,
      'commutator=' || o.oprcom::regoperator, 'negator=' || o.oprnegate::regoperator,
      'restrict=' || o.oprrest::regprocedure, 'join=' || o.oprjoin::regprocedure,
      'merges=' || o.oprcanmerge, 'hashes=' || o.oprcanhash, 'owner=' || o.oprowner::regrole)
      FROM pg_catalog.pg_operator o WHERE o.oid = m.objid)
  WHEN 'pg_catalog.pg_opclass'::regclass THEN (
    SELECT concat_ws(' ; ',
      'default=' || oc.opcdefault, 'intype=' || oc.opcintype::regtype,
      'keytype=' || oc.opckeytype::regtype,
      'family=' || pg_catalog.pg_describe_object('pg_catalog.pg_opfamily'::regclass, oc.opcfamily, 0),
      'owner=' || oc.opcowner::regrole)
      FROM pg_catalog.pg_opclass oc WHERE oc.oid = m.objid)
  WHEN 'pg_catalog.pg_opfamily'::regclass THEN (
    SELECT concat_ws(' ; ',
      'owner=' || (SELECT f.opfowner::regrole FROM pg_catalog.pg_opfamily f WHERE f.oid = m.objid),
      'operators=' || (SELECT string_agg(concat_ws(' ', ao.amopstrategy, ao.amopopr::regoperator,
                                                   ao.amoplefttype::regtype, ao.amoprighttype::regtype,
                                                   ao.amoppurpose, ao.amopsortfamily),
                                         ', ' ORDER BY ao.amopstrategy, ao.amopopr::regoperator::text)
                         FROM pg_catalog.pg_amop ao WHERE ao.amopfamily = m.objid),
      'functions=' || (SELECT string_agg(concat_ws(' ', ap.amprocnum, ap.amproc::regprocedure,
                                                   ap.amproclefttype::regtype, ap.amprocrighttype::regtype),
                                         ', ' ORDER BY ap.amprocnum, ap.amproc::regprocedure::text)
                         FROM pg_catalog.pg_amproc ap WHERE ap.amprocfamily = m.objid)))
  WHEN 'pg_catalog.pg_cast'::regclass THEN (
    SELECT concat_ws(' ; ',
      'function=' || coalesce(ca.castfunc::regprocedure::text, '-'),
      'context=' || ca.castcontext::text, 'method=' || ca.castmethod::text)
      FROM pg_catalog.pg_cast ca WHERE ca.oid = m.objid)
  WHEN 'pg_catalog.pg_event_trigger'::regclass THEN (
    SELECT concat_ws(' ; ', 'event=' || et.evtevent, 'enabled=' || et.evtenabled::text,
      'tags=' || coalesce(et.evttags::text, '-'), 'function=' || et.evtfoid::regprocedure,
      'owner=' || et.evtowner::regrole)
      FROM pg_catalog.pg_event_trigger et WHERE et.oid = m.objid)
  ELSE 'UNCOMPARED CATALOG ' || m.classid::regclass
  END AS definition,
  (SELECT string_agg(ds.objsubid || ': ' || ds.description, ' ; ' ORDER BY ds.objsubid)
     FROM pg_catalog.pg_description ds
    WHERE ds.classoid = m.classid AND ds.objoid = m.objid) AS comments,
  (SELECT string_agg(ip.objsubid || ': ' || ip.privtype::text || ' ' || ip.initprivs::text, ' ; '
                     ORDER BY ip.objsubid)
     FROM pg_catalog.pg_init_privs ip
    WHERE ip.classoid = m.classid AND ip.objoid = m.objid) AS init_privs
  FROM member m, pg_catalog.pg_identify_object(m.classid, m.objid, m.objsubid) i
)
SELECT pg_catalog.replace(concat_ws(' | ', type, identity, description, definition,
                                    'comment: ' || coalesce(comments, '-'),
                                    'init_privs: ' || coalesce(init_privs, '-')),
                          E'\n', '\n')
  FROM described
UNION ALL
-- Every dependency of the extension's members and of their parts (operator
-- family entries, columns' defaults, constraints, triggers, indexes and
-- TOAST tables, rules, policies), and of the extension itself: which are
-- hard and which soft, what SQL-standard bodies and views are bound to, a
-- sequence's owning column.  Not the user's objects that depend on them.
SELECT concat_ws(' | ', 'dependency', x.obj, x.ref, 'deptype ' || x.deptype, 'count ' || x.n)
  FROM (SELECT pg_catalog.regexp_replace(pg_catalog.pg_describe_object(d.classid, d.objid, d.objsubid),
                                          'pg_toast_[0-9]+', 'pg_toast_N', 'g') AS obj,
               pg_catalog.regexp_replace(pg_catalog.pg_describe_object(d.refclassid, d.refobjid, d.refobjsubid),
                                          'pg_toast_[0-9]+', 'pg_toast_N', 'g') AS ref,
               d.deptype::text AS deptype, pg_catalog.count(*) AS n
          FROM pg_catalog.pg_depend d
         WHERE (d.classid, d.objid) IN (SELECT mm.classid, mm.objid FROM member mm)
            OR (d.classid = 'pg_catalog.pg_extension'::regclass AND d.objid = (SELECT ext.oid FROM ext))
            OR (d.classid = 'pg_catalog.pg_amop'::regclass AND d.objid IN
                  (SELECT ao.oid FROM pg_catalog.pg_amop ao JOIN member mm
                      ON mm.classid = 'pg_catalog.pg_opfamily'::regclass AND mm.objid = ao.amopfamily))
            OR (d.classid = 'pg_catalog.pg_amproc'::regclass AND d.objid IN
                  (SELECT ap.oid FROM pg_catalog.pg_amproc ap JOIN member mm
                      ON mm.classid = 'pg_catalog.pg_opfamily'::regclass AND mm.objid = ap.amprocfamily))
            OR (d.classid = 'pg_catalog.pg_attrdef'::regclass AND d.objid IN
                  (SELECT ad.oid FROM pg_catalog.pg_attrdef ad JOIN member mm
                      ON mm.classid = 'pg_catalog.pg_class'::regclass AND mm.objid = ad.adrelid))
            OR (d.classid = 'pg_catalog.pg_constraint'::regclass AND d.objid IN
                  (SELECT co.oid FROM pg_catalog.pg_constraint co JOIN member mm
                      ON mm.classid = 'pg_catalog.pg_class'::regclass AND mm.objid = co.conrelid))
            OR (d.classid = 'pg_catalog.pg_trigger'::regclass AND d.objid IN
                  (SELECT tg.oid FROM pg_catalog.pg_trigger tg JOIN member mm
                      ON mm.classid = 'pg_catalog.pg_class'::regclass AND mm.objid = tg.tgrelid))
            OR (d.classid = 'pg_catalog.pg_rewrite'::regclass AND d.objid IN
                  (SELECT rw.oid FROM pg_catalog.pg_rewrite rw JOIN member mm
                      ON mm.classid = 'pg_catalog.pg_class'::regclass AND mm.objid = rw.ev_class))
            OR (d.classid = 'pg_catalog.pg_policy'::regclass AND d.objid IN
                  (SELECT po.oid FROM pg_catalog.pg_policy po JOIN member mm
                      ON mm.classid = 'pg_catalog.pg_class'::regclass AND mm.objid = po.polrelid))
            OR (d.classid = 'pg_catalog.pg_class'::regclass AND d.objid IN
                  (SELECT ix.indexrelid FROM pg_catalog.pg_index ix JOIN member mm
                      ON mm.classid = 'pg_catalog.pg_class'::regclass AND mm.objid = ix.indrelid
                   UNION ALL
                   SELECT tc.reltoastrelid FROM pg_catalog.pg_class tc JOIN member mm
                      ON mm.classid = 'pg_catalog.pg_class'::regclass AND mm.objid = tc.oid))
         GROUP BY 1, 2, 3) x
UNION ALL
SELECT concat_ws(' | ', 'extension', e.extname, 'version ' || e.extversion,
                 'schema ' || e.extnamespace::regnamespace, 'owner ' || e.extowner::regrole,
                 'relocatable ' || e.extrelocatable,
                 'config ' || coalesce((SELECT string_agg(cfg.rel::regclass::text || ' WHERE ' || cfg.cond,
                                                          ', ' ORDER BY cfg.rel::regclass::text)
                                          FROM unnest(e.extconfig, e.extcondition) AS cfg(rel, cond)), '-'),
                 'comment ' || coalesce(pg_catalog.obj_description(e.oid, 'pg_extension'), '-'))
  FROM ext e
ORDER BY 1;
EOSQL

my $upgraded = $node->safe_psql('upgraded', $catalog_query);
my $fresh = $node->safe_psql('fresh', $catalog_query);
# A foreign key's triggers are named after their oids, which two databases
# do not share (fencing_line's, 1.10).
s/RI_ConstraintTrigger_([ac])_\d+/RI_ConstraintTrigger_$1_N/g for ($upgraded, $fresh);
# Kept for reading (diff -u) when the comparison fails.
append_to_file("$PostgreSQL::Test::Utils::tmp_check/catalog_upgraded.txt", "$upgraded\n");
append_to_file("$PostgreSQL::Test::Utils::tmp_check/catalog_fresh.txt", "$fresh\n");
my @upgraded = split /\n/, $upgraded;
my @fresh = split /\n/, $fresh;

cmp_ok(scalar(@fresh), '>', 50,
	scalar(@fresh) . ' catalog lines for the fresh install');
unlike($fresh, qr/UNCOMPARED CATALOG/,
	'every kind of object the extension owns is compared')
  or diag join "\n", grep { /UNCOMPARED/ } @fresh;

my %in_fresh = map { $_ => 1 } @fresh;
my %in_upgraded = map { $_ => 1 } @upgraded;
my @only_upgraded = grep { !$in_fresh{$_} } @upgraded;
my @only_fresh = grep { !$in_upgraded{$_} } @fresh;
is(join("\n", @only_upgraded), '',
	'nothing in the upgraded database that a fresh install lacks');
is(join("\n", @only_fresh), '',
	'nothing in a fresh install that the upgraded database lacks');
is($upgraded, $fresh, 'the two catalogs are identical, line for line');

###############################################################################
# Rules every version keeps, checked in both databases.
###############################################################################
for my $db ('upgraded', 'fresh')
{
	# A user-facing object without a comment: functions other than type I/O,
	# operator implementations and index or aggregate support; aggregates;
	# base types (not their array types, which are the extension's members
	# too from 17 on, and take no comment); tables, views and sequences.
	is( $node->safe_psql(
			$db, q{
WITH member AS (
  SELECT d.classid, d.objid FROM pg_depend d JOIN pg_extension e ON e.oid = d.refobjid
   WHERE d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e' AND e.extname = 'pg_fencing'
), internal_fn AS (
  SELECT typinput AS fn FROM pg_type UNION SELECT typoutput FROM pg_type
  UNION SELECT typreceive FROM pg_type UNION SELECT typsend FROM pg_type
  UNION SELECT oprcode FROM pg_operator UNION SELECT amproc FROM pg_amproc
  UNION SELECT aggtransfn FROM pg_aggregate UNION SELECT aggcombinefn FROM pg_aggregate
)
SELECT string_agg(pg_describe_object(m.classid, m.objid, 0), ', '
                  ORDER BY pg_describe_object(m.classid, m.objid, 0))
  FROM member m
 WHERE obj_description(m.objid, m.classid::regclass::text) IS NULL
   AND CASE m.classid
       WHEN 'pg_proc'::regclass THEN m.objid NOT IN (SELECT fn FROM internal_fn)
       WHEN 'pg_type'::regclass THEN (SELECT typtype = 'b' AND typcategory <> 'A' FROM pg_type WHERE oid = m.objid)
       WHEN 'pg_class'::regclass THEN (SELECT relkind IN ('r', 'v', 'S', 'p', 'm') FROM pg_class WHERE oid = m.objid)
       WHEN 'pg_event_trigger'::regclass THEN true
       ELSE false END
}),
		'',
		"$db: every user-facing object the extension owns has a comment");

	is( $node->safe_psql(
			$db, q{
SELECT concat_ws(' | ', p.oid::regprocedure, l.lanname, p.prosecdef, p.proconfig::text,
                 p.provolatile, obj_description(p.oid, 'pg_proc') IS NOT NULL)
  FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
  JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e'
  JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'pg_fencing'
 WHERE p.proname = 'fencing_unprotect'
}),
		'fencing.fencing_unprotect(regclass) | plpgsql | f | {"search_path=pg_catalog, pg_temp"} | v | t',
		"$db: fencing_unprotect is the extension's, plpgsql, not SECURITY DEFINER, pinned, commented"
	);
}

###############################################################################
# The upgraded database kept its data, and 1.1 works on it.
###############################################################################
is( sql(
		'upgraded',
		"SELECT concat_ws(' ', holder, token, live) FROM fencing_leases WHERE lock_name = 'nightly'"
	),
	"worker-1 $lease_token t",
	'the lease survived the upgrade');
is(sql('upgraded', "SELECT fencing_leader('nightly')"),
	'worker-1', 'its holder is still the leader');
is(sql('upgraded', "SELECT fencing_renew('nightly', '$lease_token', '1 hour')"),
	't', 'and can renew it with its token');
is( sql(
		'upgraded',
		"SELECT high_water FROM fencing_fences WHERE lock_name = 'tenant-7'"),
	$row_token,
	'the lock-wide fence kept its mark');
is(sql('upgraded', 'SELECT last_value FROM fencing_token_seq'),
	$max_token, 'the token sequence kept its value');
my $next = sql('upgraded', 'SELECT fencing_grant()');
cmp_ok($next, '>', $max_token,
	"the first grant after the upgrade ($next) is above every earlier token ($max_token)"
);
is( sql('upgraded', 'SELECT concat_ws(\' \', token, val) FROM resource'),
	"$row_token by $row_token",
	'the protected row is as it was');
is( sql(
		'upgraded',
		"SELECT string_agg(tgrelid::regclass || '.' || tgname, ' ' ORDER BY tgrelid::regclass::text, tgname) FROM pg_trigger WHERE tgname LIKE 'fencing_guard%'"
	),
	'accounts.fencing_guard accounts.fencing_guard_truncate '
	  . 'ledger.fencing_guard ledger.fencing_guard_truncate '
	  . 'parted.fencing_guard parted.fencing_guard_truncate '
	  . 'parted_1.fencing_guard parted_1.fencing_guard_truncate '
	  . 'resource.fencing_guard',
	'the guard triggers made under 1.0 are still there');
like(
	sql_error(
		'upgraded',
		"UPDATE resource SET token = $lease_token, val = 'stale' WHERE id = 1"),
	qr/55Z01/,
	'and the guard still refuses a stale token');

sql('upgraded', "SELECT fencing_unprotect('resource')");
is( sql(
		'upgraded',
		"SELECT count(*) FROM pg_trigger WHERE tgrelid = 'resource'::regclass"),
	'0',
	'fencing_unprotect removed the per-row guard');
sql('upgraded',
	"UPDATE resource SET token = $lease_token, val = 'unfenced' WHERE id = 1");
is(sql('upgraded', 'SELECT val FROM resource'),
	'unfenced', 'an unprotected table takes any token');
like(
	sql_error('upgraded', "SELECT fencing_unprotect('resource')"),
	qr/ERROR:  55000: table "resource" is not protected by pg_fencing/,
	'unprotecting again: 55000, naming the table');

sql('upgraded', "SELECT fencing_unprotect('ledger')");
is( sql(
		'upgraded',
		"SELECT count(*) FROM pg_trigger WHERE tgrelid = 'ledger'::regclass"),
	'0',
	'fencing_unprotect removed both triggers of a lock-wide fence');
sql('upgraded', "SELECT fencing_protect('ledger', lock_name => 'tenant-7')");
like(
	sql_error('upgraded', "SELECT fencing_unprotect('parted_1')"),
	qr/55000: table "parted_1" is protected through its partitioned table "parted"/,
	'a partition alone is not unprotected');
sql('upgraded', "SELECT fencing_unprotect('parted')");
is( sql(
		'upgraded',
		"SELECT count(*) FROM pg_trigger WHERE tgrelid IN ('parted'::regclass, 'parted_1'::regclass)"
	),
	'0',
	'unprotecting the partitioned table removed the triggers of every partition');
is( sql(
		'upgraded',
		"SELECT count(*) FROM pg_trigger WHERE tgrelid = 'ledger'::regclass"),
	'2',
	'and the table can be protected again');

###############################################################################
# The upgraded database's roles carry on under the lock model, without a
# new step; a role that never used the locks cannot use them.
###############################################################################
my $writer_token = sql('upgraded', 'SELECT fencing_grant()');
is( ok_as(
		'upgraded', 'app_writer',
		"UPDATE accounts SET token = $writer_token, balance = 80 WHERE id = 1 RETURNING balance",
		"after the update: app_writer writes under 'tenant-7'"),
	'80',
	"app_writer's write landed");
is( sql_as(
		'upgraded', 'app_writer',
		"SELECT string_agg(lock_name, ',' ORDER BY lock_name) FROM fencing_locks"),
	'tenant-7',
	"app_writer sees the lock it may use, and only that one");
is( sql_as(
		'upgraded', 'app_leaser',
		"SELECT fencing_renew('jobs', '$jobs_token', '1 hour')"),
	't', "after the update: app_leaser renews its lease on 'jobs'");
is(sql_as('upgraded', 'app_leaser', "SELECT fencing_leader('jobs')"),
	'leaser-1', "app_leaser is still the leader of 'jobs'");
is( sql_as(
		'upgraded', 'app_leaser',
		"SELECT fencing_release('jobs', '$jobs_token')"),
	't', "app_leaser releases its lease");
my $jobs_again = sql_as('upgraded', 'app_leaser',
	"SELECT fencing_acquire('jobs', 'leaser-1', '1 hour')");
cmp_ok($jobs_again, '>', $jobs_token,
	"app_leaser acquires 'jobs' again, with a new token ($jobs_again)");
sql_as('upgraded', 'app_owner', 'GRANT SELECT, UPDATE ON accounts TO app_late');
my $late_token = sql('upgraded', 'SELECT fencing_grant()');
like(
	error_as(
		'upgraded', 'app_late',
		"UPDATE accounts SET token = $late_token, balance = 0 WHERE id = 1"),
	qr/ERROR:  42501: permission denied for fencing lock "tenant-7"/,
	"app_late, granted UPDATE on the table after the update, may not write under 'tenant-7'"
);
like(
	error_as(
		'upgraded', 'app_late',
		"SELECT fencing_renew('jobs', '$jobs_again', '1 hour')"),
	qr/ERROR:  42501: permission denied for fencing lock "jobs"/,
	"app_late may not renew the lease on 'jobs'");
like(
	error_as(
		'upgraded', 'app_late',
		"SELECT fencing_acquire('jobs', 'late', '1 hour')"),
	qr/ERROR:  42501: permission denied for fencing lock "jobs"/,
	"app_late may not acquire 'jobs'");
like(
	error_as(
		'upgraded', 'app_late',
		"SELECT fencing_acquire('late-lock', 'late', '1 hour')"),
	qr/ERROR:  42501: permission denied for fencing lock "late-lock"/,
	'app_late may not create a lock name');
is( sql_as(
		'upgraded', 'app_late',
		"SELECT count(*) FROM fencing_locks"),
	'0',
	'app_late sees no lock');
is(sql('upgraded', 'SELECT balance FROM accounts WHERE id = 1'),
	'80', "app_late's write did not land");

# And in the fresh install.
sql(
	'fresh', q{
CREATE TABLE resource (id int PRIMARY KEY, token fencing_token, val text);
SELECT fencing_protect('resource');
SELECT fencing_unprotect('resource');
});
is( sql(
		'fresh',
		"SELECT count(*) FROM pg_trigger WHERE tgrelid = 'resource'::regclass"),
	'0',
	'fencing_unprotect works in a fresh install');

###############################################################################
# A database at 1.2 under the current library, then updated: its leases
# carry on across the update (1.3 moved the lease functions from SQL to C).
###############################################################################
$node->safe_psql('postgres', 'CREATE DATABASE at12');
$node->safe_psql('at12',
	"CREATE SCHEMA fencing; CREATE EXTENSION pg_fencing SCHEMA fencing VERSION '1.2'");
my $held = sql('at12', "SELECT fencing_acquire('kept', 'h', '1 hour')");
is(sql('at12', "SELECT fencing_renew('kept', '$held', '1 hour')"),
	't', '1.2 SQL under the current library: renew');
my $cycled = sql('at12', "SELECT fencing_acquire('cycled', 'c', '1 hour')");
is(sql('at12', "SELECT fencing_release('cycled', '$cycled')"),
	't', '1.2 SQL under the current library: release');
sql('at12', 'ALTER EXTENSION pg_fencing UPDATE');
is( sql(
		'at12',
		"SELECT extversion FROM pg_extension WHERE extname = 'pg_fencing'"),
	$last_version,
	'1.2 updated to the current version');
is(sql('at12', "SELECT fencing_renew('kept', '$held', '1 hour')"),
	't', 'a lease granted under 1.2 renews after the update');
is(sql('at12', "SELECT fencing_acquire('kept', 'h', '1 hour')"),
	$held, 'its holder gets the same token back');
is(sql('at12', "SELECT fencing_acquire('kept', 'other', '1 hour') IS NULL"),
	't', 'and nobody else gets the lock');
my $regranted = sql('at12', "SELECT fencing_acquire('cycled', 'c', '1 hour')");
ok($regranted > $cycled, 'a lock released under 1.2 is granted again, above its old token');

###############################################################################
# A database at 1.3 under the current library: the C lease engine serves
# tables without 1.4's columns (announce, grant_count) and no history table,
# then the update adds them and the leases carry on.
###############################################################################
$node->safe_psql('postgres', 'CREATE DATABASE at13');
$node->safe_psql('at13',
	"CREATE SCHEMA fencing; CREATE EXTENSION pg_fencing SCHEMA fencing VERSION '1.3'");
my $first13 = sql('at13', "SELECT fencing_acquire('l13', 'a', '1 hour')");
is(sql('at13', "SELECT fencing_release('l13', '$first13')"),
	't', '1.3 tables under the current library: release');
my $second13 = sql('at13', "SELECT fencing_acquire('l13', 'b', '1 hour')");
ok($second13 > $first13, '1.3 tables under the current library: a grant over a released lease');
is(sql('at13', "SELECT fencing_renew('l13', '$second13', '1 hour')"),
	't', '1.3 tables under the current library: renew');
sql('at13', 'ALTER EXTENSION pg_fencing UPDATE');
is(sql('at13', "SELECT fencing_release('l13', '$second13')"),
	't', 'a lease granted under 1.3 is released after the update');
my $third13 = sql('at13', "SELECT fencing_acquire('l13', 'c', '1 hour')");
is( sql('at13',
		"SELECT string_agg(holder || ':' || coalesce(end_reason, 'live'), ',' ORDER BY token) FROM fencing_history WHERE lock_name = 'l13'"),
	'b:released,c:live',
	'after the update the history starts with the lease the first grant replaced');

###############################################################################
# A database at 1.6 with a semaphore's slots granted: the update to 1.7
# numbers them in the order of their grants (fencing_permit.grant_count),
# so that when the slots are granted again each slot's old lease keeps an
# entry of its own in the history (with one number for all, the second
# would take the first one's entry).
###############################################################################
$node->safe_psql('postgres', 'CREATE DATABASE at16');
$node->safe_psql('at16',
	"CREATE SCHEMA fencing; CREATE EXTENSION pg_fencing SCHEMA fencing VERSION '1.6'");
my @permits16 = map { sql('at16', "SELECT fencing_acquire_permit('sem16', 'p$_', 2, '1 hour')") } 1 .. 2;
sql('at16', "SELECT fencing_release('sem16', '$_')") for @permits16;
sql('at16', 'ALTER EXTENSION pg_fencing UPDATE');
is(sql('at16', "SELECT string_agg(grant_count::text, ',' ORDER BY slot) FROM fencing_permit"),
	'1,2', "the update numbers a lock's slots in the order of their grants");
sql('at16', "SELECT fencing_acquire_permit('sem16', 'q$_', 2, '1 hour')") for 1 .. 2;
is( sql('at16',
		"SELECT string_agg(holder || ':' || coalesce(end_reason, 'live') || ':' || slot, ',' ORDER BY token) FROM fencing_history WHERE lock_name = 'sem16'"),
	'p1:released:1,p2:released:2,q1:live:1,q2:live:2',
	'each slot granted under 1.6 keeps its lease in the history once granted again');

###############################################################################
# A dump of a database at 1.8 with an open session, restored where the
# current version is installed (the dump's CREATE EXTENSION makes it): the
# session's row, which has no hold_key in the dump, loads with one of its
# own (the column's default), and the session lives on and renews.  And
# the update gives every session of a database at 1.8 a key, each its own.
###############################################################################
$node->safe_psql('postgres', 'CREATE DATABASE at18');
$node->safe_psql('at18',
	"CREATE SCHEMA fencing; CREATE EXTENSION pg_fencing SCHEMA fencing VERSION '1.8'");
my $session18 = sql('at18', "SELECT fencing_session_open('w18', '1 hour')");
sql('at18', "SELECT fencing_session_open('v18', '1 hour')");
my $dump18 = $node->basedir . '/at18.sql';
$node->command_ok([ 'pg_dump', '-d', $node->connstr('at18'), '-f', $dump18 ],
	'a database at 1.8 with sessions is dumped');
$node->safe_psql('postgres', 'CREATE DATABASE from18');
$node->command_ok(
	[ 'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-d', $node->connstr('from18'), '-f', $dump18 ],
	'its dump restores where the current version is installed');
is( sql('from18',
		"SELECT extversion || ':' || count(s.hold_key) FROM pg_extension, fencing.fencing_session s WHERE extname = 'pg_fencing' GROUP BY extversion"),
	"$last_version:2",
	'the restored sessions have hold keys');
is(sql('from18', "SELECT fencing_session_renew($session18)"), 't',
	'a restored session renews');
sql('at18', 'ALTER EXTENSION pg_fencing UPDATE');
is(sql('at18', 'SELECT count(DISTINCT hold_key) FROM fencing_session'),
	'2', 'the update gives each session a key of its own');

###############################################################################
# The line (1.10) in a dump: a database with a lease in a session and two
# places waiting for it, dumped and restored.  The places come back in
# their order, after the sessions and locks they name (pg_dump orders an
# extension's tables by their foreign keys), and the first takes the lock
# once the holder releases it.
###############################################################################
$node->safe_psql('postgres', 'CREATE DATABASE atline');
$node->safe_psql('atline', 'CREATE SCHEMA fencing; CREATE EXTENSION pg_fencing SCHEMA fencing');
my ($holder_s, $first_s, $second_s) = map {
	sql('atline', "SELECT fencing_session_open('$_', '1 hour')")
} qw(holder first second);
my ($held_place, $held_token) = split /\|/,
  sql('atline', "SELECT place, token FROM fencing_line_join($holder_s, 'dumped')");
my $first_place = sql('atline', "SELECT place FROM fencing_line_join($first_s, 'dumped')");
my $second_place = sql('atline', "SELECT place FROM fencing_line_join($second_s, 'dumped')");
my $dumpline = $node->basedir . '/atline.sql';
$node->command_ok([ 'pg_dump', '-d', $node->connstr('atline'), '-f', $dumpline ],
	'a database with places in line is dumped');
$node->safe_psql('postgres', 'CREATE DATABASE fromline');
$node->command_ok(
	[ 'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-d', $node->connstr('fromline'), '-f', $dumpline ],
	'its dump restores');
is( sql('fromline',
		"SELECT string_agg(state, ',' ORDER BY place) FROM fencing_line_poll(ARRAY[$held_place, $first_place, $second_place])"),
	'granted,waiting,waiting',
	'the restored line has its places, in order');
is(sql('fromline', "SELECT fencing_release('dumped', '$held_token')"), 't',
	'the restored lease is released');
is( sql('fromline',
		"SELECT string_agg(state, ',' ORDER BY place) FROM fencing_line_poll(ARRAY[$second_place, $first_place])"),
	'granted,waiting',
	'the first restored place takes the lock, the second waits');

$node->stop;
done_testing();
