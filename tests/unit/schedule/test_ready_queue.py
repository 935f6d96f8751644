from veeksha.schedule.ready_queue import ReadyQueue


def test_pops_only_due_items_in_time_order() -> None:
    q: ReadyQueue[str] = ReadyQueue()
    q.push(2_000, "b")
    q.push(1_000, "a")
    q.push(3_000, "d")
    q.push(2_000, "c")
    assert q.pop_due(1_500) == ["a"]
    assert q.next_time() == 2_000
    assert q.pop_due(2_000) == ["b", "c"]
    assert len(q) == 1
    assert q.pop_due(2_999) == []
    assert q.drain() == ["d"]
    assert q.next_time() is None


def test_priority_breaks_ties_before_insertion_order() -> None:
    q: ReadyQueue[str] = ReadyQueue()
    q.push(5, "low", priority=1)
    q.push(5, "high", priority=0)
    assert q.pop() == (5, "high")
    assert q.pop_due(5, limit=5) == ["low"]


def test_limit_caps_what_leaves() -> None:
    q: ReadyQueue[int] = ReadyQueue()
    for i in range(10):
        q.push(i, i)
    assert q.pop_due(100, limit=3) == [0, 1, 2]
    assert len(q) == 7
