"""`GET /metrics`: the server's counters in Prometheus text format."""

from __future__ import annotations

from tickflow.net.gateway.context import Gateway


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


def render_metrics(gateway: Gateway) -> str:
    exchange = gateway.service.metrics()
    counters = gateway.counters
    gauges = [
        ("tickflow_queue_depth", "gauge", "commands waiting for the sequencer", exchange.queue_depth),
        ("tickflow_commands_total", "counter", "commands sequenced since start", exchange.commands),
        ("tickflow_batches_total", "counter", "batches written since start", exchange.batches),
        ("tickflow_orders_total", "counter", "orders ever placed (order ids issued)", exchange.orders),
        ("tickflow_trades_total", "counter", "trades ever made (trade ids issued)", exchange.trades),
        ("tickflow_log_seq", "gauge", "sequence number of the last durable record", exchange.durable_seq),
        ("tickflow_websocket_clients", "gauge", "open WebSocket connections", exchange.subscribers),
        ("tickflow_websocket_refused_total", "counter", "WebSocket connections refused at the limit",
         counters["ws_refused"]),
        ("tickflow_cancel_on_disconnect_total", "counter",
         "WebSockets with cancel on disconnect that closed, their account's open orders cancelled",
         counters["cancel_on_disconnect"]),
        ("tickflow_auth_failures_total", "counter", "failed sign-ins (a token the server does not know), HTTP and "
         "WebSocket", gateway.sign_in_failures.total),
        ("tickflow_rate_limited_total", "counter", "order-entry requests refused for their account's order rate "
         "(429)", gateway.order_rate.refused),
        ("tickflow_host_refused_total", "counter", "requests refused for the host they name (403: DNS rebinding)",
         counters["host_refused"]),
        ("tickflow_websocket_origin_refused_total", "counter", "WebSocket upgrades refused for their Origin (403)",
         counters["ws_origin_refused"]),
        ("tickflow_websocket_answers_too_large_total", "counter", "WebSocket answers over the size one may be, "
         "replaced by an error", counters["ws_replies_too_large"]),
        ("tickflow_websocket_auth_timeouts_total", "counter", "WebSockets closed for neither signing in nor "
         "subscribing within --auth-timeout", counters["ws_auth_timeouts"]),
        ("tickflow_websocket_resyncs_total", "counter", "slow-consumer resyncs", exchange.resyncs),
        ("tickflow_websocket_messages_total", "counter", "WebSocket messages received", counters["ws_messages"]),
        ("tickflow_websocket_buffered_bytes", "gauge", "market data waiting in subscribers' buffers",
         exchange.buffered_bytes),
        ("tickflow_log_failed", "gauge", "1 when the log device failed", int(exchange.log_failed)),
        ("tickflow_log_bytes", "gauge", "bytes of the log on disk, all its segments", exchange.log_bytes),
        ("tickflow_log_segments", "gauge", "log segment files on disk", exchange.log_segments),
        ("tickflow_snapshot_seq", "gauge", "sequence number of the newest snapshot (0: none)", exchange.snapshot_seq),
        ("tickflow_snapshot_age_records", "gauge", "records sequenced since the newest snapshot",
         exchange.snapshot_age_records),
        ("tickflow_snapshot_age_seconds", "gauge", "seconds since the newest snapshot was written (or the start)",
         round(exchange.snapshot_age_seconds, 3)),
        ("tickflow_snapshots_total", "counter", "snapshots written since start", exchange.snapshots_taken),
        ("tickflow_snapshot_failures_total", "counter", "snapshots that failed since start (retried later)",
         exchange.snapshot_failures),
        ("tickflow_client_order_ids", "gauge", "clientOrderIds remembered, those inside the idempotency window",
         exchange.client_order_ids),
        ("tickflow_trade_store_check_failures_total", "counter", "background integrity checks that found the trade "
         "store damaged since start", exchange.store_check_failures),
    ]
    lines: list[str] = []
    for name, kind, about, value in gauges:
        lines += [f"# HELP {name} {about}", f"# TYPE {name} {kind}", f"{name} {value}"]
    lines += _histogram("tickflow_batch_size", "commands per batch", exchange.batch_bounds,
                        exchange.batch_sizes, exchange.commands)
    lines += _histogram("tickflow_fsync_seconds", "fdatasync latency", exchange.sync_bounds_seconds,
                        exchange.sync_counts, exchange.sync_seconds)
    return "\n".join(lines) + "\n"
