-- pg_fencing 1.0: fencing tokens enforced by the database.
\echo Use "CREATE EXTENSION pg_fencing" to load this file. \quit

-------------------------------------------------------------------------------
-- The fencing_token type
-------------------------------------------------------------------------------
-- An int8 in disguise: same size, alignment and Datum, so comparison, hashing
-- and min/max reuse PostgreSQL's int8 functions (LANGUAGE internal).  Only
-- input and the casts differ: a token is never negative and never computed.

CREATE TYPE @extschema@.fencing_token;

CREATE FUNCTION @extschema@.fencing_token_in(cstring) RETURNS @extschema@.fencing_token
  AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
CREATE FUNCTION @extschema@.fencing_token_out(@extschema@.fencing_token) RETURNS cstring
  AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
CREATE FUNCTION @extschema@.fencing_token_recv(internal) RETURNS @extschema@.fencing_token
  AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
CREATE FUNCTION @extschema@.fencing_token_send(@extschema@.fencing_token) RETURNS bytea
  AS 'MODULE_PATHNAME' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;

CREATE TYPE @extschema@.fencing_token (
  INPUT = @extschema@.fencing_token_in,
  OUTPUT = @extschema@.fencing_token_out,
  RECEIVE = @extschema@.fencing_token_recv,
  SEND = @extschema@.fencing_token_send,
  INTERNALLENGTH = 8,
  PASSEDBYVALUE,
  ALIGNMENT = double,
  STORAGE = plain
);
COMMENT ON TYPE @extschema@.fencing_token IS
  'fencing token: a non-negative 64-bit integer, ordered, without arithmetic';

-- Comparison support: PostgreSQL's int8 implementations.
CREATE FUNCTION @extschema@.fencing_token_eq(@extschema@.fencing_token, @extschema@.fencing_token)
  RETURNS boolean AS 'int8eq' LANGUAGE internal IMMUTABLE STRICT PARALLEL SAFE LEAKPROOF;
CREATE FUNCTION @extschema@.fencing_token_ne(@extschema@.fencing_token, @extschema@.fencing_token)
  RETURNS boolean AS 'int8ne' LANGUAGE internal IMMUTABLE STRICT PARALLEL SAFE LEAKPROOF;
CREATE FUNCTION @extschema@.fencing_token_lt(@extschema@.fencing_token, @extschema@.fencing_token)
  RETURNS boolean AS 'int8lt' LANGUAGE internal IMMUTABLE STRICT PARALLEL SAFE LEAKPROOF;
CREATE FUNCTION @extschema@.fencing_token_le(@extschema@.fencing_token, @extschema@.fencing_token)
  RETURNS boolean AS 'int8le' LANGUAGE internal IMMUTABLE STRICT PARALLEL SAFE LEAKPROOF;
CREATE FUNCTION @extschema@.fencing_token_gt(@extschema@.fencing_token, @extschema@.fencing_token)
  RETURNS boolean AS 'int8gt' LANGUAGE internal IMMUTABLE STRICT PARALLEL SAFE LEAKPROOF;
CREATE FUNCTION @extschema@.fencing_token_ge(@extschema@.fencing_token, @extschema@.fencing_token)
  RETURNS boolean AS 'int8ge' LANGUAGE internal IMMUTABLE STRICT PARALLEL SAFE LEAKPROOF;
CREATE FUNCTION @extschema@.fencing_token_cmp(@extschema@.fencing_token, @extschema@.fencing_token)
  RETURNS integer AS 'btint8cmp' LANGUAGE internal IMMUTABLE STRICT PARALLEL SAFE LEAKPROOF;
CREATE FUNCTION @extschema@.fencing_token_sortsupport(internal)
  RETURNS void AS 'btint8sortsupport' LANGUAGE internal IMMUTABLE STRICT PARALLEL SAFE;
CREATE FUNCTION @extschema@.fencing_token_hash(@extschema@.fencing_token)
  RETURNS integer AS 'hashint8' LANGUAGE internal IMMUTABLE STRICT PARALLEL SAFE LEAKPROOF;
CREATE FUNCTION @extschema@.fencing_token_hash_extended(@extschema@.fencing_token, bigint)
  RETURNS bigint AS 'hashint8extended' LANGUAGE internal IMMUTABLE STRICT PARALLEL SAFE LEAKPROOF;
CREATE FUNCTION @extschema@.fencing_token_larger(@extschema@.fencing_token, @extschema@.fencing_token)
  RETURNS @extschema@.fencing_token AS 'int8larger' LANGUAGE internal IMMUTABLE STRICT PARALLEL SAFE;
CREATE FUNCTION @extschema@.fencing_token_smaller(@extschema@.fencing_token, @extschema@.fencing_token)
  RETURNS @extschema@.fencing_token AS 'int8smaller' LANGUAGE internal IMMUTABLE STRICT PARALLEL SAFE;

CREATE OPERATOR @extschema@.= (
  LEFTARG = @extschema@.fencing_token, RIGHTARG = @extschema@.fencing_token,
  FUNCTION = @extschema@.fencing_token_eq, COMMUTATOR = OPERATOR(@extschema@.=),
  NEGATOR = OPERATOR(@extschema@.<>), RESTRICT = eqsel, JOIN = eqjoinsel, HASHES, MERGES
);
CREATE OPERATOR @extschema@.<> (
  LEFTARG = @extschema@.fencing_token, RIGHTARG = @extschema@.fencing_token,
  FUNCTION = @extschema@.fencing_token_ne, COMMUTATOR = OPERATOR(@extschema@.<>),
  NEGATOR = OPERATOR(@extschema@.=), RESTRICT = neqsel, JOIN = neqjoinsel
);
CREATE OPERATOR @extschema@.< (
  LEFTARG = @extschema@.fencing_token, RIGHTARG = @extschema@.fencing_token,
  FUNCTION = @extschema@.fencing_token_lt, COMMUTATOR = OPERATOR(@extschema@.>),
  NEGATOR = OPERATOR(@extschema@.>=), RESTRICT = scalarltsel, JOIN = scalarltjoinsel
);
CREATE OPERATOR @extschema@.<= (
  LEFTARG = @extschema@.fencing_token, RIGHTARG = @extschema@.fencing_token,
  FUNCTION = @extschema@.fencing_token_le, COMMUTATOR = OPERATOR(@extschema@.>=),
  NEGATOR = OPERATOR(@extschema@.>), RESTRICT = scalarlesel, JOIN = scalarlejoinsel
);
CREATE OPERATOR @extschema@.> (
  LEFTARG = @extschema@.fencing_token, RIGHTARG = @extschema@.fencing_token,
  FUNCTION = @extschema@.fencing_token_gt, COMMUTATOR = OPERATOR(@extschema@.<),
  NEGATOR = OPERATOR(@extschema@.<=), RESTRICT = scalargtsel, JOIN = scalargtjoinsel
);
CREATE OPERATOR @extschema@.>= (
  LEFTARG = @extschema@.fencing_token, RIGHTARG = @extschema@.fencing_token,
  FUNCTION = @extschema@.fencing_token_ge, COMMUTATOR = OPERATOR(@extschema@.<=),
  NEGATOR = OPERATOR(@extschema@.<), RESTRICT = scalargesel, JOIN = scalargejoinsel
);

CREATE OPERATOR CLASS @extschema@.fencing_token_btree_ops
  DEFAULT FOR TYPE @extschema@.fencing_token USING btree AS
    OPERATOR 1 @extschema@.<,
    OPERATOR 2 @extschema@.<=,
    OPERATOR 3 @extschema@.=,
    OPERATOR 4 @extschema@.>=,
    OPERATOR 5 @extschema@.>,
    FUNCTION 1 @extschema@.fencing_token_cmp(@extschema@.fencing_token, @extschema@.fencing_token),
    FUNCTION 2 @extschema@.fencing_token_sortsupport(internal);

CREATE OPERATOR CLASS @extschema@.fencing_token_hash_ops
  DEFAULT FOR TYPE @extschema@.fencing_token USING hash AS
    OPERATOR 1 @extschema@.=,
    FUNCTION 1 @extschema@.fencing_token_hash(@extschema@.fencing_token),
    FUNCTION 2 @extschema@.fencing_token_hash_extended(@extschema@.fencing_token, bigint);

CREATE AGGREGATE @extschema@.max(@extschema@.fencing_token) (
  SFUNC = @extschema@.fencing_token_larger, STYPE = @extschema@.fencing_token,
  COMBINEFUNC = @extschema@.fencing_token_larger, SORTOP = OPERATOR(@extschema@.>),
  PARALLEL = SAFE
);
CREATE AGGREGATE @extschema@.min(@extschema@.fencing_token) (
  SFUNC = @extschema@.fencing_token_smaller, STYPE = @extschema@.fencing_token,
  COMBINEFUNC = @extschema@.fencing_token_smaller, SORTOP = OPERATOR(@extschema@.<),
  PARALLEL = SAFE
);
COMMENT ON AGGREGATE @extschema@.max(@extschema@.fencing_token) IS 'highest fencing token';
COMMENT ON AGGREGATE @extschema@.min(@extschema@.fencing_token) IS 'lowest fencing token';

-- Casts.  Integers become tokens on assignment, so "SET token = $1" works
-- with a bigint parameter from any driver; a negative value is refused.
-- Tokens become int8 on assignment or explicitly, never implicitly, so
-- "token + 1" stays an error: tokens are compared, never computed.
CREATE FUNCTION @extschema@.fencing_token(bigint) RETURNS @extschema@.fencing_token
  AS 'MODULE_PATHNAME', 'fencing_token_from_int8' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
CREATE FUNCTION @extschema@.fencing_token(integer) RETURNS @extschema@.fencing_token
  AS 'MODULE_PATHNAME', 'fencing_token_from_int4' LANGUAGE C IMMUTABLE STRICT PARALLEL SAFE;
CREATE CAST (bigint AS @extschema@.fencing_token)
  WITH FUNCTION @extschema@.fencing_token(bigint) AS ASSIGNMENT;
CREATE CAST (integer AS @extschema@.fencing_token)
  WITH FUNCTION @extschema@.fencing_token(integer) AS ASSIGNMENT;
CREATE CAST (@extschema@.fencing_token AS bigint) WITHOUT FUNCTION AS ASSIGNMENT;
COMMENT ON FUNCTION @extschema@.fencing_token(bigint) IS
  'cast bigint to fencing_token; negative values are out of range';
COMMENT ON FUNCTION @extschema@.fencing_token(integer) IS
  'cast integer to fencing_token; negative values are out of range';

-------------------------------------------------------------------------------
-- Granting tokens
-------------------------------------------------------------------------------
-- CACHE 1: with a per-session cache, values are unique but not ordered
-- across sessions, and a token must be above every token granted before it.
CREATE SEQUENCE @extschema@.fencing_token_seq
  AS bigint MINVALUE 1 MAXVALUE 9223372036854775807 START 1 CACHE 1 NO CYCLE;
REVOKE ALL ON SEQUENCE @extschema@.fencing_token_seq FROM PUBLIC;
-- Dumped with its current value, so a restored database keeps granting
-- above every token granted before the dump.
SELECT pg_catalog.pg_extension_config_dump('@extschema@.fencing_token_seq', '');
COMMENT ON SEQUENCE @extschema@.fencing_token_seq IS
  'source of fencing_grant(); use fencing_grant(), not nextval(), which is not crash-safe for tokens';

CREATE FUNCTION @extschema@.fencing_grant() RETURNS @extschema@.fencing_token
  AS 'MODULE_PATHNAME', 'fencing_grant' LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE;
COMMENT ON FUNCTION @extschema@.fencing_grant() IS
  'a new fencing token, above every token granted before, durable before it is returned';

-------------------------------------------------------------------------------
-- The guard
-------------------------------------------------------------------------------
CREATE FUNCTION @extschema@.fencing_guard() RETURNS trigger
  AS 'MODULE_PATHNAME', 'fencing_guard' LANGUAGE C;
COMMENT ON FUNCTION @extschema@.fencing_guard() IS
  'BEFORE UPDATE row trigger: refuses a fencing token lower than the row has seen (55Z01) or a missing one (55Z02); arguments: column name, then options allow_unset, skip';

CREATE FUNCTION @extschema@.fencing_resolve_token_column(tbl regclass, token_column name, options text[])
  RETURNS name AS 'MODULE_PATHNAME', 'fencing_resolve_token_column' LANGUAGE C STABLE PARALLEL SAFE;
COMMENT ON FUNCTION @extschema@.fencing_resolve_token_column(regclass, name, text[]) IS
  'the token column fencing_protect() would guard, after checking it and the options';

CREATE FUNCTION @extschema@.fencing_protect(
    tbl regclass, token_column name DEFAULT NULL, options text[] DEFAULT '{}')
  RETURNS void LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  col name := @extschema@.fencing_resolve_token_column(tbl, token_column, options);
  trigger_args text;
BEGIN
  SELECT pg_catalog.string_agg(pg_catalog.quote_literal(arg), ', ' ORDER BY ord)
    INTO trigger_args
    FROM pg_catalog.unnest(ARRAY[col::text] OPERATOR(pg_catalog.||) options)
         WITH ORDINALITY AS a(arg, ord);
  -- OR REPLACE: protecting again changes the column or options in place.
  EXECUTE pg_catalog.format(
    'CREATE OR REPLACE TRIGGER fencing_guard BEFORE UPDATE ON %s '
    'FOR EACH ROW EXECUTE FUNCTION @extschema@.fencing_guard(%s)', tbl, trigger_args);
END
$$;
COMMENT ON FUNCTION @extschema@.fencing_protect(regclass, name, text[]) IS
  'installs the fencing_guard trigger on a table (its only fencing_token column unless named)';
