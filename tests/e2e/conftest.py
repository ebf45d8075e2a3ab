"""Broker fixtures for the e2e suite.

One broker process (fjord by default, Apache Kafka with E2E_BROKER=kafka) serves the whole session; tests
may stop, kill -9 and restart it, and the `broker` fixture brings it back up for the next test. Its data
dir is kept across restarts and removed with pytest's temporary directories.
"""

import pytest

from harness import Broker, make_broker, make_class_archives


@pytest.fixture(scope="session", autouse=True)
def class_archives(tmp_path_factory) -> None:
    """The short-lived JVMs' class-data archives, made before the first test when missing."""
    make_class_archives(tmp_path_factory.mktemp("class-archives"))


@pytest.fixture(scope="session")
def session_broker(tmp_path_factory) -> Broker:
    b = make_broker(tmp_path_factory.mktemp("broker"))
    b.start()
    yield b
    if b.running():
        b.stop()


@pytest.fixture
def broker(session_broker: Broker) -> Broker:
    """The session's broker, started again if an earlier test left it down."""
    if not session_broker.running():
        session_broker.start()
    return session_broker
