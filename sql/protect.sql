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
