"""Exactly-once copying on one node, as Kafka's own transactions system test checks it (copier.py): the copiers
are killed with SIGKILL, then the broker (the transaction and group coordinator) while the restarted copiers work.
The three-node run is in test_replication.py."""

from copier import copy_exactly_once


def test_transactional_copiers_copy_exactly_once_through_kills(broker, tmp_path):
    def kill_the_broker(copiers, out_topic):
        broker.kill9()
        broker.start()

    copy_exactly_once(broker.bootstrap, tmp_path, 1, [("broker", 0, kill_the_broker)])
