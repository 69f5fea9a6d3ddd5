"""`GET /metrics`: the server's counters in Prometheus text format."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tickflow.net.exchange.sequencer import Stats

if TYPE_CHECKING:
    from tickflow.net.gateway.app import Exchange


def _histogram(name: str, about: str, bounds: tuple[float, ...], counts: list[int], total: float) -> list[str]:
    lines = [f"# HELP {name} {about}", f"# TYPE {name} histogram"]
    running = 0
    for bound, count in zip(bounds, counts):
        running += count
        lines.append(f'{name}_bucket{{le="{bound:g}"}} {running}')
    running += counts[-1]
    lines.append(f'{name}_bucket{{le="+Inf"}} {running}')
    lines.append(f"{name}_sum {total:g}")
    lines.append(f"{name}_count {running}")
    return lines


def render_metrics(ex: "Exchange") -> str:
    stats: Stats = ex.sequencer.stats
    engine = ex.engine
    gauges = [
        ("tickflow_queue_depth", "gauge", "commands waiting for the sequencer", ex.sequencer.queue_depth),
        ("tickflow_commands_total", "counter", "commands sequenced since start", stats.commands),
        ("tickflow_batches_total", "counter", "batches written since start", stats.batches),
        ("tickflow_orders_total", "counter", "orders ever placed (order ids issued)", engine.next_order_id - 1),
        ("tickflow_trades_total", "counter", "trades ever made (trade ids issued)", engine.next_trade_id - 1),
        ("tickflow_log_seq", "gauge", "sequence number of the last durable record", ex.feed.durable_seq),
        ("tickflow_websocket_clients", "gauge", "open WebSocket connections", len(ex.feed.subscribers)),
        ("tickflow_websocket_refused_total", "counter", "WebSocket connections refused at the limit",
         ex.counters["ws_refused"]),
        ("tickflow_cancel_on_disconnect_total", "counter",
         "WebSockets with cancel on disconnect that closed, their account's open orders cancelled",
         ex.counters["cancel_on_disconnect"]),
        ("tickflow_websocket_resyncs_total", "counter", "slow-consumer resyncs", ex.feed.stats_resyncs),
        ("tickflow_websocket_messages_total", "counter", "WebSocket messages received", ex.counters["ws_messages"]),
        ("tickflow_websocket_buffered_bytes", "gauge", "market data waiting in subscribers' buffers",
         sum(s.buffered for s in ex.feed.subscribers)),
        ("tickflow_log_failed", "gauge", "1 when the log device failed", int(bool(ex.sequencer.failed))),
    ]
    lines: list[str] = []
    for name, kind, about, value in gauges:
        lines += [f"# HELP {name} {about}", f"# TYPE {name} {kind}", f"{name} {value}"]
    lines += _histogram("tickflow_batch_size", "commands per batch", Stats.BATCH_BUCKETS,
                        stats.batch_sizes, stats.commands)
    lines += _histogram("tickflow_fsync_seconds", "fdatasync latency",
                        tuple(b / 1000 for b in Stats.SYNC_BUCKETS_MS), stats.sync_hist, stats.sync_seconds)
    return "\n".join(lines) + "\n"
