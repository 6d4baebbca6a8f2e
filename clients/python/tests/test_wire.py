"""pg_fencing._wire without a server: the connection options every
connection of the package is made with, and NoAnswer's message."""

from __future__ import annotations

import time

import pytest

import pg_fencing
from pg_fencing import _line, _wire, lease as lease_module
from pg_fencing._wire import NoAnswer


@pytest.fixture(scope="session", autouse=True)
def extension():
    """conftest's creates the extension on a live server; none is needed here."""
    yield


class _Recorder:
    """Stands for psycopg.Connection: records what connect() was given."""

    @classmethod
    def connect(cls, conninfo, **options):
        return conninfo, options


def test_the_packages_connections_make_no_named_prepared_statements():
    conninfo, options = _wire.connect(_Recorder, "dbname=app", "pg_fencing lease " + "x" * 80)
    assert conninfo == "dbname=app"
    assert "prepare_threshold" in options and options["prepare_threshold"] is None
    assert options["autocommit"] is True
    assert len(options["application_name"]) == 63


def test_a_prepare_threshold_given_explicitly_is_kept():
    assert _wire.connect(_Recorder, "", "n", prepare_threshold=5)[1]["prepare_threshold"] == 5


def test_no_answer_says_what_went_unanswered_and_within_what_deadline():
    error = NoAnswer('the renewal of lock "jobs"', 2.0)
    assert str(error).startswith('no answer from the server within 2 s to the renewal of lock "jobs"')
    assert str(NoAnswer("the renewal of the lease", 0.25)).startswith(
        "no answer from the server within 0.25 s to the renewal of the lease")
    assert str(NoAnswer()), "a NoAnswer never has an empty message"


class _Unanswered:
    """Stands for _wire.Connection: the wait is granted (after longer than
    the safety margin, so that acquire() renews at once) and the renewal
    gets no answer."""

    released = []

    def __init__(self, conninfo, application_name):
        self.closed = False

    def row(self, sql, params=()):
        if sql.startswith("SELECT fencing_release"):
            _Unanswered.released.append(params)
            return (True,)
        time.sleep(0.3)
        return ("42",)

    def value_by(self, sql, params, deadline, what=None):
        raise NoAnswer(what, deadline - time.monotonic())

    def close(self):
        self.closed = True


def test_a_renewal_without_answer_leaves_acquire_as_lease_lost(monkeypatch):
    # (A campaign waits in a session of its own since 1.10: its heartbeat
    # renews the session, and the lease in it, all along.)
    monkeypatch.setattr(lease_module, "Connection", _Unanswered)
    client = pg_fencing.Client("")
    with pytest.raises(pg_fencing.LeaseLost) as raised:
        client.lock("jobs", ttl=2, wait=5).acquire()
    assert not isinstance(raised.value, NoAnswer)
    assert isinstance(raised.value.__cause__, NoAnswer)
    message = str(raised.value)
    assert 'lock "jobs" was granted (token 42)' in message, message
    assert "no answer from the server within" in message and " s to the renewal of" in message
    assert len(_Unanswered.released) == 1  # the grant was given back


def test_the_poll_period_of_a_wait_in_line():
    assert _line.poll_period(None, listening=False) == 0.5, "a hand-over seen within a second"
    assert _line.poll_period(None, listening=True) == 2.0
    assert _line.poll_period(0.1, listening=True) == 0.1
    with pytest.raises(ValueError, match="poll"):
        pg_fencing.Client("", poll=0)
    client = pg_fencing.Client("")
    assert client.listen is False and client._listener is None, "no LISTEN unless asked for"


def test_a_number_heard_before_its_place_is_followed_still_wakes_it():
    board = _line.Board()
    since = board.mark()
    board.heard("41")
    board.heard("not a number")  # anyone may NOTIFY on any channel
    woken = []
    board.follow(41, since, lambda: woken.append(41))
    board.follow(42, since, lambda: woken.append(42))
    assert woken == [41]
    stop = board.follow(7, board.mark(), lambda: woken.append(7))
    board.heard("7")
    stop()
    board.heard("7")
    assert woken == [41, 7]
