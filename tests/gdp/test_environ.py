"""gdp.environ reads what os.environ holds, as it changes after import."""

import os

from gdp import environ


def test_reads_follow_os_environ(monkeypatch):
    name = "GDP_TEST_ENVIRON_SWITCH"
    monkeypatch.delenv(name, raising=False)
    assert environ.get(name) is None and environ.get(name, "x") == "x"
    assert not environ.flag(name)
    for value, flag in (("", False), ("0", False), ("1", True), ("off", True), ("é", True)):
        monkeypatch.setenv(name, value)
        assert environ.get(name) == os.environ[name] == value
        assert environ.flag(name) is flag
    os.environ[name] = "cpu"
    assert environ.get(name) == "cpu"
    del os.environ[name]
    assert environ.get(name) is None


def test_switches_follow_os_environ(monkeypatch):
    names = ("GDP_TEST_SWITCH_A", "GDP_TEST_SWITCH_B")
    for name in names:
        monkeypatch.delenv(name, raising=False)
    switches = environ.Switches(*names)
    assert switches.unset()
    for name in names:
        monkeypatch.setenv(name, "0")  # set, whatever its value
        assert not switches.unset()
        monkeypatch.delenv(name)
        assert switches.unset()
