"""Messages that carry network results back to the screen ("attributes down, messages up")."""

from __future__ import annotations

from textual.message import Message

from tickflow.net.client import AccountFill, Bar, Order, SymbolInfo


class FeedChanged(Message):
    """Some of the market state changed. One pending message stands for any number of feed events:
    the handler redraws whatever is dirty, so a burst of updates costs one redraw."""

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, FeedChanged)


class BarsLoaded(Message):
    """`GET /bars` over the trades with ids below `before`."""

    def __init__(self, symbol: str, bars: list[Bar], before: int) -> None:
        super().__init__()
        self.symbol = symbol
        self.bars = bars
        self.before = before


class SymbolsLoaded(Message):
    def __init__(self, symbols: list[SymbolInfo]) -> None:
        super().__init__()
        self.symbols = symbols


class OpenOrdersLoaded(Message):
    def __init__(self, orders: list[Order]) -> None:
        super().__init__()
        self.orders = orders


class FillsLoaded(Message):
    """`GET /fills` for `symbol`, newest first, asked of the exchange the market's `epoch` counted then."""

    def __init__(self, symbol: str, fills: list[AccountFill], epoch: int) -> None:
        super().__init__()
        self.symbol = symbol
        self.fills = fills
        self.epoch = epoch


class OrderAnswered(Message):
    """The answer to an order call made from the screen: the order, or an error text; `order_id` names
    the order a cancel was for."""

    def __init__(self, action: str, order: Order | None, error: str | None = None,
                 order_id: int | None = None) -> None:
        super().__init__()
        self.action = action
        self.order = order
        self.error = error
        self.order_id = order_id


class AllCancelled(Message):
    """The answer to cancel all in `symbol`: the orders it cancelled, or an error text; `asked` are the
    open orders the screen showed there when it asked."""

    def __init__(self, symbol: str, asked: list[int], orders: list[Order], error: str | None = None) -> None:
        super().__init__()
        self.symbol = symbol
        self.asked = asked
        self.orders = orders
        self.error = error


class PriceSelected(Message):
    """A book level was chosen: its price goes into the ticket."""

    def __init__(self, price: int, side: str) -> None:
        super().__init__()
        self.price = price
        self.side = side
