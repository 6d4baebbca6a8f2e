-- fencing_protect(): installs the guard after checking the table.
\set SHOW_CONTEXT never

CREATE TABLE one_token (id int PRIMARY KEY, tok fencing_token, val text);
INSERT INTO one_token VALUES (1, 5, 'a');
-- With no column named, the only fencing_token column is guarded.
SELECT fencing_protect('one_token');
SELECT tgname, tgtype, tgenabled, tgnargs, encode(tgargs, 'escape') AS args,
       tgfoid::regprocedure
FROM pg_trigger WHERE tgrelid = 'one_token'::regclass;
UPDATE one_token SET tok = 4;
UPDATE one_token SET val = 'b';
-- Protecting again replaces the trigger: here with options.
SELECT fencing_protect('one_token', options => '{allow_unset,skip}');
SELECT tgname, encode(tgargs, 'escape') AS args FROM pg_trigger WHERE tgrelid = 'one_token'::regclass;
UPDATE one_token SET val = 'b';
UPDATE one_token SET tok = 4, val = 'skipped';
SELECT * FROM one_token;

-- Errors: no token column, several, a missing or wrongly typed column,
-- an unknown or NULL option, a NULL table.
CREATE TABLE no_token (id int);
SELECT fencing_protect('no_token');
CREATE TABLE two_tokens (a fencing_token, b fencing_token);
SELECT fencing_protect('two_tokens');
SELECT fencing_protect('two_tokens', 'b');
SELECT tgname, encode(tgargs, 'escape') AS args FROM pg_trigger WHERE tgrelid = 'two_tokens'::regclass;
SELECT fencing_protect('two_tokens', 'c');
SELECT fencing_protect('no_token', 'id');
SELECT fencing_protect('one_token', 'tok', '{allow_unset,frobnicate}');
SELECT fencing_protect('one_token', 'tok', '{NULL}');
SELECT fencing_protect(NULL);
SELECT fencing_protect('no_such_table');

-- Table names that need quoting, in a schema.
CREATE SCHEMA "My Schema";
CREATE TABLE "My Schema"."Odd Table" ("Token Col" fencing_token, x int);
INSERT INTO "My Schema"."Odd Table" VALUES (10, 1);
SELECT fencing_protect('"My Schema"."Odd Table"');
UPDATE "My Schema"."Odd Table" SET "Token Col" = 9;
UPDATE "My Schema"."Odd Table" SET "Token Col" = 10, x = 2;
SELECT * FROM "My Schema"."Odd Table";

-- Only the table's owner can protect it.
CREATE ROLE protect_stranger;
GRANT USAGE ON SCHEMA "My Schema" TO protect_stranger;
SET ROLE protect_stranger;
SELECT fencing_protect('"My Schema"."Odd Table"');
RESET ROLE;
DROP SCHEMA "My Schema" CASCADE;
DROP ROLE protect_stranger;

-- fencing_protect is C; fencing_protect_as, which runs the DDL as the
-- caller, pins its search_path, and PUBLIC may not call it.
SELECT proname, (SELECT lanname FROM pg_language l WHERE l.oid = prolang) AS language, proconfig,
       has_function_privilege('public', oid, 'EXECUTE') AS public_may_execute
FROM pg_proc WHERE proname IN ('fencing_protect', 'fencing_protect_as') ORDER BY 1;

-- A lock named by the option word lock=NAME is lock_name by another name
-- (1.7): the same triggers on every write path, so a stale INSERT and a
-- token-less DELETE are refused as under lock_name; the same check of the
-- lock, so a role that may not use it cannot protect its own table under
-- it; and with fence_reads, the read fence (before 1.7 that call crashed
-- the backend: the word alone left the read fence without its lock).
CREATE TABLE by_option (id int PRIMARY KEY, tok fencing_token);
CREATE TABLE by_argument (id int PRIMARY KEY, tok fencing_token);
SELECT fencing_protect('by_option', options => '{lock=prot-word}');
SELECT fencing_protect('by_argument', lock_name => 'prot-word');
SELECT c.relname, t.tgname, t.tgtype, encode(t.tgargs, 'escape') AS args
FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
WHERE c.relname IN ('by_option', 'by_argument') ORDER BY t.tgname, c.relname;
SELECT fencing_acquire('prot-word', 'h', '1 hour') AS word_token \gset
CREATE FUNCTION pg_temp.outcome(statement text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
  EXECUTE statement;
  RETURN 'done';
EXCEPTION WHEN OTHERS THEN
  RETURN SQLSTATE;  -- not the message, which names the tokens
END $$;
SELECT pg_temp.outcome(format('INSERT INTO by_option VALUES (1, %s)', :'word_token')) AS current_insert,
       pg_temp.outcome(format('INSERT INTO by_option VALUES (2, %s)', :'word_token'::bigint - 1)) AS stale_insert,
       pg_temp.outcome('DELETE FROM by_option WHERE id = 1') AS tokenless_delete;
SELECT fencing_protect('by_option', options => '{lock=prot-word,fence_reads}');
SELECT polname FROM pg_policy WHERE polrelid = 'by_option'::regclass ORDER BY 1;
SELECT fencing_protect('by_option', options => '{lock=prot-word}', lock_name => 'prot-other');
CREATE ROLE protect_intruder;
GRANT CREATE ON SCHEMA public TO protect_intruder;
SET ROLE protect_intruder;
CREATE TABLE intruder_own (id int, tok fencing_token);
SELECT fencing_protect('intruder_own', options => '{lock=prot-word}');
DROP TABLE intruder_own;
RESET ROLE;
REVOKE CREATE ON SCHEMA public FROM protect_intruder;
DROP ROLE protect_intruder;
SELECT fencing_release('prot-word', :'word_token');
DROP TABLE by_option, by_argument;
