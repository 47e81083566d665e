"""The ledger that keeps a receiver from taking a sender's message twice (pure logic)."""

from ddq.core.senders import SenderLedger


def test_a_repeat_is_refused_per_sender_and_attempt_and_unnumbered_messages_always_pass():
    ledger = SenderLedger()
    assert ledger.take(0, 0, 1) and ledger.take(0, 0, 2) and ledger.take(1, 0, 1)
    assert not ledger.take(0, 0, 2) and not ledger.take(0, 0, 1)  # sent again after a lost reply
    assert ledger.take(0, 1, 1)  # the same worker's next Spark attempt counts from 1 again
    assert ledger.take(0, 0, 0) and ledger.take(0, 0, 0)  # unnumbered
    assert ledger.repeats == 2


def test_follows_says_whether_a_message_comes_right_after_the_last_one_taken():
    ledger = SenderLedger()
    assert not ledger.follows(0, 0, 1)  # nothing before it here
    ledger.take(0, 0, 1)
    assert ledger.follows(0, 0, 2) and not ledger.follows(0, 0, 3) and not ledger.follows(0, 1, 2)
