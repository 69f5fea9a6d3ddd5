from tickflow.core.engine import Engine
from tickflow.core.types import NewOrder


def test_a_crossing_order_trades_at_the_resting_price() -> None:
    engine = Engine(["ACME"])
    engine.apply(1, 0, NewOrder("alice", "ACME", "sell", "limit", 101, 5))
    outcome = engine.apply(2, 0, NewOrder("bob", "ACME", "buy", "limit", 105, 5))
    assert outcome.result is not None and outcome.result.status == "filled"
    assert [(t.price, t.qty) for t in outcome.trades] == [(101, 5)]
