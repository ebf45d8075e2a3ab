"""A Kafka Streams word count with exactly_once_v2 on one node (wordcount.py), killed with SIGKILL mid-stream and
restarted: every word's counts are exactly 1..n. The three-node run is in test_replication.py."""

from wordcount import count_words_exactly_once


def test_exactly_once_word_count_through_a_kill(broker, tmp_path):
    count_words_exactly_once(broker.bootstrap, tmp_path, 1)
