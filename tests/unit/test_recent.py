"""app/recent.py: the bounded memory every per-process "remember this" of the read path uses."""

from __future__ import annotations

from app.recent import Recent


def test_the_oldest_key_is_forgotten_past_the_size_and_setting_a_key_makes_it_the_newest() -> None:
    recent: Recent[str, int] = Recent(2)
    recent.put("a", 1)
    recent.put("b", 2)
    recent.put("a", 3)  # "a" is the newest now: "b" goes next
    recent.put("c", 4)
    assert ("a" in recent, "b" in recent, "c" in recent) == (True, False, True)
    assert recent.get("a") == 3 and recent.get("b") is None


def test_add_says_whether_the_key_was_there_and_keeps_it_newest() -> None:
    recent: Recent[str, bool] = Recent(2)
    assert recent.add("a", True) is False
    assert recent.add("b", True) is False
    assert recent.add("a", True) is True
    recent.put("c", True)
    assert "a" in recent and "b" not in recent


def test_a_value_is_dropped_only_when_asked_of_it() -> None:
    recent: Recent[str, int] = Recent(4)
    recent.put("k", 10)
    assert recent.get_and_drop_if("k", lambda until: until <= 5) == 10
    assert recent.get("k") == 10
    assert recent.get_and_drop_if("k", lambda until: until <= 10) == 10
    assert "k" not in recent
    assert recent.get_and_drop_if("k", lambda until: True) is None
    recent.put("k", 1)
    assert recent.pop("k") == 1 and recent.pop("k") is None
    recent.put("k", 1)
    recent.clear()
    assert "k" not in recent
