"""A read held for a moment: asked once for every caller with the same arguments, and
asked again once the moment has passed."""

from __future__ import annotations

from reports.models import Held
from reports.models import held as held_module


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def counted(answers: dict | None = None):
    asked: list[tuple] = []

    def read(*args):
        asked.append(args)
        return (answers or {}).get(args, len(asked))

    return read, asked


def test_the_same_question_within_the_moment_is_asked_once():
    clock = Clock()
    read, asked = counted()
    held = Held(read, for_s=1.0, clock=clock)

    first = [held("short") for _ in range(50)]
    clock.now += 0.99
    assert held("short") == first[0] == 1 and len(set(first)) == 1
    assert asked == [("short",)]


def test_it_is_asked_again_once_the_moment_has_passed_and_each_question_apart():
    clock = Clock()
    read, asked = counted()
    held = Held(read, for_s=1.0, clock=clock)

    assert [held("short"), held("long")] == [1, 2]
    clock.now += 1.0
    assert [held("short"), held("short"), held("long")] == [3, 3, 4]
    assert asked == [("short",), ("long",), ("short",), ("long",)]


def test_a_key_says_which_arguments_make_the_same_question():
    clock = Clock()
    read, asked = counted()
    held = Held(read, for_s=1.0, key=lambda task: task[0], clock=clock)

    assert [held(("alice", 1)), held(("alice", 2)), held(("bob", 3))] == [1, 1, 2]
    assert asked == [(("alice", 1),), (("bob", 3),)]


def test_forget_makes_the_next_call_ask():
    read, asked = counted()
    held = Held(read, for_s=60.0, clock=Clock())

    held("short")
    held.forget()
    held("short")
    assert len(asked) == 2


def test_answers_past_their_moment_do_not_pile_up(monkeypatch):
    monkeypatch.setattr(held_module, "MOST", 10)
    clock = Clock()
    read, _ = counted()
    held = Held(read, for_s=1.0, clock=clock)

    for n in range(10):
        held(n)
    clock.now += 1.0
    for n in range(10, 15):
        held(n)
    assert len(held) == 5  # the ten expired answers went when the store was full
