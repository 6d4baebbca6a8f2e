-- The line (1.10): a wait for an exclusive lease as a place kept by the
-- database, between short calls, instead of a statement that runs for the
-- whole wait.  Arrival order, a place that joins again, a wait that runs
-- out, a session that ends, leaving, exclusive first, and a role that
-- tries another's places.  Places are shown by the names of their
-- candidates, tokens by whether there is one: their numbers depend on what
-- ran before.
\set SHOW_CONTEXT never
CREATE FUNCTION pg_temp.try(query text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
  EXECUTE query;
  RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
  RETURN SQLSTATE || ': ' || regexp_replace(regexp_replace(SQLERRM, '[0-9]{6,}', 'N', 'g'),
                                            'place [0-9]+', 'place N', 'g');
END $$;
CREATE ROLE ln_app;
CREATE ROLE ln_other;
SELECT fencing_allow_create('ln_app');

SET ROLE ln_app;
SELECT fencing_session_open('leader', '1 hour') AS s_leader \gset
SELECT fencing_session_open('first', '1 hour') AS s_first \gset
SELECT fencing_session_open('second', '1 hour') AS s_second \gset

-- 1. The first to join a free lock takes it at once; the others wait, in
-- the order they came.
SELECT place AS p_leader, token IS NOT NULL AS took_it FROM fencing_line_join(:s_leader, 'ln') \gset
SELECT :'took_it' AS leader_took_it;
SELECT place AS p_first, token IS NULL AS waits FROM fencing_line_join(:s_first, 'ln') \gset
SELECT place AS p_second, token IS NULL AS waits FROM fencing_line_join(:s_second, 'ln', '1 hour') \gset
SELECT :p_leader < :p_first AND :p_first < :p_second AS in_arrival_order;
CREATE TEMP VIEW line AS
  SELECT CASE place WHEN :p_leader THEN 'leader' WHEN :p_first THEN 'first'
                    WHEN :p_second THEN 'second' ELSE place::text END AS who,
         lock_name, state, token IS NOT NULL AS has_token
    FROM fencing_line_poll(ARRAY[:p_leader, :p_first, :p_second]);
SELECT * FROM line;
-- Joined again (a retry after a lost answer): the same place.
SELECT place = :p_first AS same_place, token IS NULL AS still_waits
  FROM fencing_line_join(:s_first, 'ln');
SELECT place = :p_leader AS same_place, token IS NOT NULL AS still_holds
  FROM fencing_line_join(:s_leader, 'ln');

-- 2. The leader resigns: nobody but the first in line may take the lock,
-- not a plain acquire, not the second's session, not a new session.
SELECT fencing_release('ln', (SELECT token FROM fencing_line_poll(ARRAY[:p_leader]))) AS resigned;
SELECT fencing_acquire('ln', 'outsider', '1 minute') IS NULL AS outsider_waits;
SELECT fencing_session_acquire(:s_second, 'ln') IS NULL AS second_waits;
SELECT fencing_session_open('newcomer', '1 hour') AS s_new \gset
SELECT fencing_session_acquire(:s_new, 'ln') IS NULL AS newcomer_waits;
-- The first takes it when it polls (or acquires in its session).
SELECT * FROM line;
SELECT holder, state FROM fencing_leases WHERE lock_name = 'ln';

-- 3. A place granted and given back by leaving: the lease is released and
-- the next place may take it.
SELECT fencing_line_leave(:p_first) AS left_line;
SELECT fencing_line_leave(:p_first) AS left_again;
SELECT holder, state FROM fencing_leases WHERE lock_name = 'ln';
SELECT * FROM line;
SELECT holder, state FROM fencing_leases WHERE lock_name = 'ln';
SELECT fencing_session_close(:s_second) AS closed_second;
-- Closed: its place went with its session.
SELECT * FROM line;

-- 4. A wait that runs out leaves the line; a place whose session has
-- ended is stepped over, and goes with the session.
SELECT fencing_session_acquire(:s_new, 'ln') IS NOT NULL AS newcomer_holds;
SELECT place AS p_short FROM fencing_line_join(:s_first, 'ln', '10 ms') \gset
SELECT fencing_session_open('brief', '200 ms') AS s_brief \gset
SELECT place AS p_brief FROM fencing_line_join(:s_brief, 'ln') \gset
SELECT place AS p_last FROM fencing_line_join(:s_leader, 'ln') \gset
SELECT pg_sleep(0.3);
SELECT fencing_session_close(:s_new) AS newcomer_closed;
SELECT CASE place WHEN :p_short THEN 'short wait' WHEN :p_brief THEN 'ended session'
                  WHEN :p_last THEN 'last' END AS who, state, token IS NOT NULL AS has_token
  FROM fencing_line_poll(ARRAY[:p_short, :p_brief, :p_last]);

-- 5. Exclusive first: while a place waits, a lock's shared leases give
-- way to it.  A semaphore has no place for an exclusive lease.
SELECT fencing_acquire_shared('ln_sh', 'reader', '1 hour') IS NOT NULL AS reader_holds;
SELECT place AS p_writer, token IS NULL AS writer_waits
  FROM fencing_line_join(:s_first, 'ln_sh') \gset
SELECT :'writer_waits' AS writer_waits;
SELECT fencing_acquire_shared('ln_sh', 'reader2', '1 hour') IS NULL AS new_reader_waits;
SELECT fencing_acquire_permit('ln_sem', 'p', 2, '1 minute') IS NOT NULL AS permit_taken;
SELECT pg_temp.try(format('SELECT fencing_line_join(%s, %L)', :s_first, 'ln_sem'));

-- 6. Bad input.
SELECT pg_temp.try('SELECT fencing_line_join(NULL, ''ln'')');
SELECT pg_temp.try(format('SELECT fencing_line_join(%s, %L)', :s_first, ''));
SELECT pg_temp.try(format('SELECT fencing_line_join(%s, %L, %L)', :s_first, 'ln', '-1 s'));
SELECT pg_temp.try('SELECT fencing_line_join(42, ''ln'')');
SELECT * FROM fencing_line_poll('{}');
SELECT count(*) FROM fencing_line_poll(ARRAY[NULL, 42]::bigint[]);
RESET ROLE;

-- 7. Another role: its own session in A's line is refused (it may not use
-- A's lock), and A's places and sessions answer as ones that do not exist.
SET ROLE ln_other;
SELECT fencing_session_open('intruder', '1 hour') AS s_other \gset
SELECT pg_temp.try(format('SELECT fencing_line_join(%s, %L)', :s_other, 'ln'));
SELECT pg_temp.try(format('SELECT fencing_line_join(%s, %L)', :s_first, 'ln_other'));
SELECT place = :p_last AS asked, lock_name, state, token
  FROM fencing_line_poll(ARRAY[:p_last, :p_writer]);
SELECT fencing_line_leave(:p_last) AS left_anothers_place;
SELECT pg_temp.try('SELECT count(*) FROM fencing_line');
SELECT pg_temp.try('SELECT nextval(''fencing_line_place_seq'')');
RESET ROLE;
SET ROLE ln_app;
SELECT CASE place WHEN :p_last THEN 'last' WHEN :p_writer THEN 'writer' END AS who, state
  FROM fencing_line_poll(ARRAY[:p_last, :p_writer]);
RESET ROLE;

-- 8. The view: the places that wait, in order, for the locks a role may
-- read; another role sees none of A's.
SET ROLE ln_app;
SELECT fencing_session_open('viewer-a', '1 hour') AS s_va \gset
SELECT fencing_session_open('viewer-b', '1 hour') AS s_vb \gset
SELECT token IS NOT NULL AS took_it FROM fencing_line_join(:s_va, 'ln_view');
SELECT token IS NULL AS waits FROM fencing_line_join(:s_vb, 'ln_view', '1 hour');
SELECT token IS NULL AS waits FROM fencing_line_join(:s_va, 'ln_view2');
SELECT lock_name, position, holder, role, wait_until IS NOT NULL AS has_deadline, live
  FROM fencing_lines WHERE lock_name LIKE 'ln_view%' ORDER BY lock_name, position;
RESET ROLE;
SET ROLE ln_other;
SELECT count(*) AS places_seen FROM fencing_lines;
RESET ROLE;

-- 9. What two reviews found, each refused or stepped over now.
-- The waiting room's waiter (a waiting function, even with a wait of 0) is
-- served before the line, until every wait is a place; everything else
-- gives way to the place, acquire_all without a wait included.
SET ROLE ln_app;
SELECT fencing_session_open('holder9', '1 hour') AS s_h9 \gset
SELECT fencing_session_open('waiter9', '1 hour') AS s_w9 \gset
SELECT token IS NOT NULL AS holds FROM fencing_line_join(:s_h9, 'ln9');
SELECT place AS p_w9 FROM fencing_line_join(:s_w9, 'ln9') \gset
SELECT fencing_release('ln9', (SELECT token FROM fencing_leases WHERE lock_name = 'ln9')) AS released;
SELECT fencing_session_acquire_all(:s_h9, ARRAY['ln9']) IS NULL AS acquire_all_gives_way;
SELECT fencing_acquire('ln9', 'room-waiter', '1 minute', '0 s') AS room_token \gset
SELECT :'room_token' <> '' AS room_waiter_served_first;
SELECT fencing_release('ln9', :'room_token') AS released;
SELECT fencing_acquire('ln9', 'jumper', '1 minute') IS NULL AS plain_acquire_gives_way;
-- The first place's session taking the lock by fencing_session_acquire
-- (not a poll): the place waits no more, and the lock is not kept for it
-- after its release.
SELECT fencing_session_acquire(:s_w9, 'ln9') IS NOT NULL AS first_place_acquires;
SELECT state FROM fencing_line_poll(ARRAY[:p_w9]);
SELECT fencing_release('ln9', (SELECT token FROM fencing_leases WHERE lock_name = 'ln9')) AS released;
SELECT fencing_acquire('ln9', 'next', '1 minute') IS NOT NULL AS free_for_the_next;
-- A join with a wait of 0 makes one attempt: a free lock is taken.
SELECT token IS NOT NULL AS took_it FROM fencing_line_join(:s_w9, 'ln9b', '0 s');
-- Only at READ COMMITTED: a snapshot would show a place and its lease as
-- they were.
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT pg_temp.try(format('SELECT * FROM fencing_line_poll(ARRAY[%s])', :p_w9));
ROLLBACK;
RESET ROLE;
-- A role whose use of the lock is revoked holds no place in its line: it
-- is stepped over, and its own poll finds its place gone.
SELECT fencing_create_lock('ln9c', 'ln_app');
SELECT fencing_grant_lock('ln9c', 'ln_other');
SET ROLE ln_app;
SELECT token IS NOT NULL AS holds FROM fencing_line_join(:s_h9, 'ln9c');
RESET ROLE;
SET ROLE ln_other;
SELECT fencing_session_open('revoked', '1 hour') AS s_rv \gset
SELECT place AS p_rv FROM fencing_line_join(:s_rv, 'ln9c') \gset
RESET ROLE;
SET ROLE ln_app;
SELECT place AS p_app9 FROM fencing_line_join(:s_w9, 'ln9c') \gset
RESET ROLE;
SELECT fencing_revoke_lock('ln9c', 'ln_other');
SET ROLE ln_app;
SELECT fencing_release('ln9c', (SELECT token FROM fencing_leases WHERE lock_name = 'ln9c')) AS released;
SELECT state FROM fencing_line_poll(ARRAY[:p_app9]);
RESET ROLE;
SET ROLE ln_other;
SELECT state FROM fencing_line_poll(ARRAY[:p_rv]);
RESET ROLE;
-- Places whose sessions ended unswept, ahead of a live one: a poll of the
-- lock deletes them (100 at a time), so that nobody steps over them again.
SET ROLE ln_app;
SELECT token IS NOT NULL AS holds FROM fencing_line_join(:s_h9, 'ln9d');
SELECT count((fencing_line_join(fencing_session_open('gone' || n, '1 s'), 'ln9d')).place)
  FROM generate_series(1, 120) n;
SELECT place AS p_live FROM fencing_line_join(:s_w9, 'ln9d') \gset
SELECT pg_sleep(1.1);
SELECT state FROM fencing_line_poll(ARRAY[:p_live]);
RESET ROLE;
SELECT count(*) AS dead_places_left FROM fencing_line l JOIN fencing_lock k USING (lock_id)
 WHERE k.lock_name = 'ln9d' AND l.place < :p_live;

-- 10. Shared leases and permits wait in line too (kind => 'shared' or
-- 'permit', as for fencing_session_acquire).  A semaphore's free permits
-- go to its places in order, as many at once as are free, and a permit
-- taken outside the line gives way to them.
SET ROLE ln_app;
SELECT fencing_session_open('p1', '1 hour') AS s_p1 \gset
SELECT fencing_session_open('p2', '1 hour') AS s_p2 \gset
SELECT fencing_session_open('p3', '1 hour') AS s_p3 \gset
SELECT fencing_acquire_permit('ln_sem10', 'out1', 2, '1 hour') AS t_out1 \gset
SELECT fencing_acquire_permit('ln_sem10', 'out2', 2, '1 hour') AS t_out2 \gset
SELECT place AS p_p1, token IS NULL AS waits
  FROM fencing_line_join(:s_p1, 'ln_sem10', NULL, NULL, 'permit', 2) \gset
SELECT place AS p_p2 FROM fencing_line_join(:s_p2, 'ln_sem10', NULL, NULL, 'permit', 2) \gset
SELECT place AS p_p3 FROM fencing_line_join(:s_p3, 'ln_sem10', kind => 'permit', permits => 2) \gset
SELECT :'waits' AS first_permit_place_waits;
CREATE TEMP VIEW permit_line AS
  SELECT CASE place WHEN :p_p1 THEN 'p1' WHEN :p_p2 THEN 'p2' WHEN :p_p3 THEN 'p3' END AS who,
         state, token IS NOT NULL AS has_token
    FROM fencing_line_poll(ARRAY[:p_p1, :p_p2, :p_p3]);
SELECT kind, position FROM fencing_lines WHERE lock_name = 'ln_sem10' ORDER BY place;
-- One permit freed: it is the first place's; not a permit outside the
-- line's, nor the second place's (polled before the first).
SELECT fencing_release('ln_sem10', :'t_out1') AS released;
SELECT fencing_acquire_permit('ln_sem10', 'outsider', 2, '1 hour') IS NULL AS outsider_gives_way;
SELECT state FROM fencing_line_poll(ARRAY[:p_p2]);
SELECT * FROM permit_line;
-- Two freed at once: both waiting places take one, the later polled first.
SELECT fencing_release('ln_sem10', :'t_out2') AS released;
SELECT fencing_line_leave(:p_p1) AS p1_left_giving_back;
SELECT state FROM fencing_line_poll(ARRAY[:p_p3]);
SELECT state FROM fencing_line_poll(ARRAY[:p_p2]);
SELECT count(*) AS permits_held_in_sessions FROM fencing_permits
 WHERE lock_name = 'ln_sem10' AND holder IN ('p2', 'p3') AND live;
-- A shared place waits while the exclusive lease lives; an exclusive place
-- that joins after it goes first all the same (exclusive first); then the
-- shared place takes its lease, beside a shared lease from outside the
-- line.
SELECT fencing_acquire('ln_sh10', 'writer', '1 hour') AS t_w10 \gset
SELECT place AS p_sh, token IS NULL AS waits
  FROM fencing_line_join(:s_p1, 'ln_sh10', kind => 'shared') \gset
SELECT :'waits' AS shared_place_waits;
SELECT place AS p_ex FROM fencing_line_join(:s_p2, 'ln_sh10') \gset
SELECT fencing_release('ln_sh10', :'t_w10') AS released;
SELECT state FROM fencing_line_poll(ARRAY[:p_sh]);
SELECT state FROM fencing_line_poll(ARRAY[:p_ex]);
SELECT fencing_line_leave(:p_ex) AS writer_left_giving_back;
SELECT state FROM fencing_line_poll(ARRAY[:p_sh]);
SELECT fencing_acquire_shared('ln_sh10', 'reader', '1 hour') IS NOT NULL AS reader_beside_it;
-- Bad kinds, and a join again for something else.
SELECT pg_temp.try(format('SELECT fencing_line_join(%s, %L, kind => %L)', :s_p3, 'ln10', 'both'));
SELECT pg_temp.try(format('SELECT fencing_line_join(%s, %L, kind => NULL)', :s_p3, 'ln10'));
SELECT pg_temp.try(format('SELECT fencing_line_join(%s, %L, kind => %L)', :s_p3, 'ln10', 'permit'));
SELECT pg_temp.try(format('SELECT fencing_line_join(%s, %L, kind => %L, permits => 0)', :s_p3, 'ln10', 'permit'));
SELECT pg_temp.try(format('SELECT fencing_line_join(%s, %L, permits => 2)', :s_p3, 'ln10'));
SELECT pg_temp.try(format('SELECT fencing_line_join(%s, %L, payload => %L, kind => %L)', :s_p3, 'ln10', '{}', 'shared'));
SELECT pg_temp.try(format('SELECT fencing_line_join(%s, %L, kind => %L)', :s_p1, 'ln_sem10', 'shared'));
SELECT pg_temp.try(format('SELECT fencing_line_join(%s, %L, kind => %L, permits => 3)', :s_p1, 'ln_sem10', 'permit'));
SELECT pg_temp.try(format('SELECT fencing_line_join(%s, %L, kind => %L, permits => 2)', :s_p3, 'ln_sh10', 'permit'));
SELECT pg_temp.try(format('SELECT fencing_line_join(%s, %L, kind => %L, permits => 3)', :s_p3, 'ln_sem10', 'permit'));
SELECT place AS p_ex3 FROM fencing_line_join(:s_p3, 'ln_ex10') \gset
SELECT pg_temp.try(format('SELECT fencing_line_join(%s, %L, kind => %L)', :s_p3, 'ln_ex10', 'shared'));
RESET ROLE;
-- Another role cannot see or take ln_app's permit places.
SET ROLE ln_other;
SELECT state FROM fencing_line_poll(ARRAY[:p_p2, :p_p3]);
SELECT fencing_line_leave(:p_p2) AS left_anothers_place;
RESET ROLE;
SET ROLE ln_app;
SELECT state FROM fencing_line_poll(ARRAY[:p_p2]);
RESET ROLE;
