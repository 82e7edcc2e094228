"""The conversation clock: one LRU of conversations, one budget in bytes, released whole."""
from zllm_core.conversation_clock import ConversationClock, Held


class Store:
    """States by key, as a store keeps them; `held` files one with the clock."""

    def __init__(self, kind: str):
        self.kind, self.states = kind, {}

    def held(self, key, nbytes: int) -> Held:
        self.states[key] = nbytes
        return Held(self.kind, key, nbytes, lambda: self.states.pop(key, None))


def test_past_the_budget_the_least_recently_used_conversation_is_released_whole():
    clock, memo, tokens = ConversationClock(budget_bytes=1000), Store("memo"), Store("tokenizer")
    clock.touch("a", [memo.held("a", 300), tokens.held("a", 100)])
    clock.touch("b", [memo.held("b", 300), tokens.held("b", 100)])
    clock.touch("a")  # a is used again: b is now the oldest
    clock.touch("c", [memo.held("c", 300), tokens.held("c", 100)])
    assert set(memo.states) == set(tokens.states) == {"a", "c"}
    assert clock.stats.bytes == 800 <= clock.budget_bytes and clock.stats.evictions == 1
    assert clock.holds("b") == []


def test_a_state_that_grows_is_charged_its_new_size():
    clock, tokens = ConversationClock(budget_bytes=1000), Store("tokenizer")
    clock.touch("a", [tokens.held(1, 400)])
    clock.touch("b", [tokens.held(2, 400)])
    clock.hold("b", tokens.held(2, 700))  # b's answer recorded: over the budget, a goes
    assert clock.stats.bytes == 700 and set(tokens.states) == {2}


def test_a_conversation_in_use_is_not_evicted():
    clock, tokens = ConversationClock(budget_bytes=1000), Store("tokenizer")
    clock.touch("a", [tokens.held("a", 600)])
    with clock.in_use("a"):
        clock.touch("b", [tokens.held("b", 600)])
        assert set(tokens.states) == {"a", "b"}  # over the budget while a runs
    assert set(tokens.states) == {"b"} and clock.stats.bytes == 600  # released once a's request ends


def test_a_state_belongs_to_the_conversation_that_used_it_last():
    clock, render = ConversationClock(budget_bytes=1000), Store("render")
    shared = render.held("opening", 500)  # two conversations that open alike
    clock.touch("a", [shared])
    clock.touch("b", [shared])
    clock.touch("c", [render.held("c", 600)])  # evicts b (a holds nothing now)
    assert "opening" not in render.states and clock.stats.bytes == 600


def test_an_id_keeps_its_latest_states_of_a_kind():
    clock, tokens = ConversationClock(budget_bytes=1 << 20, per_kind=2), Store("tokenizer")
    for session in range(4):  # a conversation that forked its tokenizer session thrice
        clock.touch("a", [tokens.held(session, 10)])
    assert set(tokens.states) == {2, 3} and clock.stats.bytes == 20


def test_a_state_filed_after_its_conversation_was_evicted_is_released():
    clock, tokens = ConversationClock(budget_bytes=100), Store("tokenizer")
    clock.touch("a", [tokens.held("a", 80)])
    clock.touch("b", [tokens.held("b", 80)])
    clock.hold("a", tokens.held("a", 90))
    assert set(tokens.states) == {"b"}
