"""pg_fencing._wire without a server: the connection options every
connection of the package is made with, and NoAnswer's message."""

from __future__ import annotations

import time

import pytest

import pg_fencing
from pg_fencing import _wire, lease as lease_module
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


def test_a_renewal_without_answer_leaves_campaign_and_acquire_as_lease_lost(monkeypatch):
    monkeypatch.setattr(lease_module, "Connection", _Unanswered)
    client = pg_fencing.Client("")
    for call in (lambda: client.lock("jobs", ttl=2, wait=5).acquire(),
                 lambda: client.election("jobs", ttl=2).campaign()):
        with pytest.raises(pg_fencing.LeaseLost) as raised:
            call()
        assert not isinstance(raised.value, NoAnswer)
        assert isinstance(raised.value.__cause__, NoAnswer)
        message = str(raised.value)
        assert 'lock "jobs" was granted (token 42)' in message, message
        assert "no answer from the server within" in message and " s to the renewal of" in message
    assert len(_Unanswered.released) == 2  # the grant was given back both times
