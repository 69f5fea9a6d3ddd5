"""The command palette (ctrl+p): every action of the screen by name, and one entry per symbol."""

from __future__ import annotations

from functools import partial

from textual.command import DiscoveryHit, Hit, Hits, Provider

ACTIONS: list[tuple[str, str, str]] = [
    ("Submit order", "submit", "Send the order in the ticket"),
    ("Side: buy", "side('buy')", "Set the ticket to buy (b)"),
    ("Side: sell", "side('sell')", "Set the ticket to sell (s)"),
    ("Go to ticket", "goto('ticket')", "Focus the ticket's price field (t)"),
    ("Go to order book", "goto('book')", "Focus the book; enter puts a level's price in the ticket (d)"),
    ("Go to my orders", "goto('orders')", "Focus my open orders (o)"),
    ("My fills", "toggle_fills", "My fills in this symbol, newest first, in the place of my orders (f)"),
    ("Cancel selected order", "cancel_selected", "Cancel the order chosen in My orders (c)"),
    ("Amend selected order", "amend_selected", "Change the chosen order's quantity or price (a)"),
    ("Cancel all my orders in this symbol", "cancel_all", "Cancel every open order of mine here (C)"),
    ("Next symbol", "cycle_symbol(1)", "Show the next symbol (])"),
    ("Previous symbol", "cycle_symbol(-1)", "Show the previous symbol ([)"),
    ("Reload", "reload", "Fetch bars and my open orders again and re-subscribe (r)"),
    ("Swap red and green", "swap_colors", "Swap the buy and sell colours (x)"),
    ("Help", "help", "Keys, colours and arrows (?)"),
    ("Quit", "quit", "Leave tickflow (q)"),
]


class TickflowCommands(Provider):
    def _entries(self) -> list[tuple[str, str, str]]:
        symbols = getattr(self.app, "market", None)
        entries = list(ACTIONS)
        for symbol in symbols.symbols if symbols is not None else []:
            entries.append((f"Switch to {symbol}", f"switch_symbol({symbol!r})", f"Show {symbol}'s book"))
        return entries

    async def discover(self) -> Hits:
        for title, action, help_text in self._entries():
            yield DiscoveryHit(title, partial(self.app.run_action, action), help=help_text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for title, action, help_text in self._entries():
            score = matcher.match(title)
            if score > 0:
                yield Hit(score, matcher.highlight(title), partial(self.app.run_action, action),
                          help=help_text)
