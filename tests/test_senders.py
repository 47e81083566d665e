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


def test_the_account_says_what_each_sender_sent_and_what_became_of_it_and_survives_a_snapshot():
    ledger = SenderLedger()
    for number in (1, 2, 4, 5):  # 3 never arrived
        assert ledger.take(7, 11, number)
    ledger.drop(7, 11, 5)  # taken, then too stale to apply
    assert not ledger.take(7, 11, 2)  # delivered again
    assert ledger.take(8, 12, 1)
    assert ledger.account() == [
        {"sender": 7, "incarnation": 11, "sent": 5, "applied": 3, "dropped": 1, "repeats": 1, "lost": 1},
        {"sender": 8, "incarnation": 12, "sent": 1, "applied": 1, "dropped": 0, "repeats": 0, "lost": 0}]
    restored = SenderLedger()
    restored.load_state(ledger.state(), ledger.repeats)
    assert restored.account() == ledger.account()
    assert not restored.take(7, 11, 4) and restored.account()[0]["repeats"] == 2  # refused after the restore too


def test_a_ledger_from_before_the_account_counts_every_number_up_to_its_newest_as_applied():
    ledger = SenderLedger()
    ledger.load_state([[3, 9, 6]])
    assert ledger.account() == [{"sender": 3, "incarnation": 9, "sent": 6, "applied": 6, "dropped": 0, "repeats": 0,
                                 "lost": 0}]
