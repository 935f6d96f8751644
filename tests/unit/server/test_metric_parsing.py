"""Prometheus answers into samples: names kept as exposed, labels as sorted JSON, known names
mapped to canonical ones, anything else refused as a whole."""

from __future__ import annotations

import time
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from veeksha.server.metric_names import CANONICAL, canonical_name
from veeksha.server.scraper import parse_metrics

VLLM = """# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="m",engine="0"} 3.0
# TYPE vllm:request_success_total counter
vllm:request_success_total{model_name="m",finished_reason="stop"} 7.0
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{model_name="m",le="0.1"} 2.0
vllm:time_to_first_token_seconds_bucket{model_name="m",le="+Inf"} 7.0
vllm:time_to_first_token_seconds_sum{model_name="m"} 1.5
vllm:time_to_first_token_seconds_count{model_name="m"} 7.0
some_other_metric 42
"""


def test_samples_keep_their_exposed_names_kinds_and_sorted_labels() -> None:
    samples = parse_metrics(VLLM)
    assert samples[0] == (
        "vllm:num_requests_waiting", '{"engine":"0","model_name":"m"}', 3.0, "gauge", "waiting"
    )  # fmt: skip
    assert samples[1][0] == "vllm:request_success_total"
    assert samples[1][3:] == ("counter", "finished")
    names = [s[0] for s in samples if s[3] == "histogram"]
    assert names == [
        "vllm:time_to_first_token_seconds_bucket",
        "vllm:time_to_first_token_seconds_bucket",
        "vllm:time_to_first_token_seconds_sum",
        "vllm:time_to_first_token_seconds_count",
    ]
    assert samples[-1] == ("some_other_metric", "{}", 42.0, "unknown", None)


@pytest.mark.parametrize("text", ["<html>404</html>", '{"data": []}', "a b c"])
def test_garbage_is_refused(text: str) -> None:
    with pytest.raises(ValueError):  # noqa: PT011  (the parser's own messages vary)
        parse_metrics(text)


def test_every_engine_has_its_queue_metrics_named() -> None:
    for prefix in ("vllm:", "sglang:", "llamacpp:", "tgi_"):
        for canonical in ("running", "waiting"):
            assert any(m.startswith(prefix) for m in CANONICAL[canonical])
    assert canonical_name("sglang:num_queue_reqs") == "waiting"
    assert canonical_name("tgi_request_success") == "finished"
    assert canonical_name("llamacpp:kv_cache_usage_ratio") == "kv_usage"
    assert canonical_name("process_cpu_seconds_total") is None


def test_nvidia_smi_lines_become_gpu_gauges_without_unreadable_fields() -> None:
    from veeksha.server.gpu import parse_line

    assert parse_line("3, 97, 70000, 81920, 612.25\n") == [
        ("gpu:utilization", '{"gpu": "3"}', 97.0, "gauge", None),
        ("gpu:memory_used", '{"gpu": "3"}', 70000.0, "gauge", None),
        ("gpu:memory_total", '{"gpu": "3"}', 81920.0, "gauge", None),
        ("gpu:power", '{"gpu": "3"}', 612.25, "gauge", None),
    ]
    assert [s[0] for s in parse_line("0, [N/A], 1, 2, [Not Supported]")] == [
        "gpu:memory_used",
        "gpu:memory_total",
    ]
    assert parse_line("NVIDIA-SMI has failed") == []


def test_a_scrape_error_quoting_the_key_is_masked(tmp_path: Path) -> None:
    from veeksha.record.server_metrics import ServerMetricsWriter
    from veeksha.server.scraper import MetricsScraper

    warnings: list[str] = []
    scraper = MetricsScraper(
        "http://127.0.0.1:1/metrics",
        "sk-very-secret-1234",
        1.0,
        0,
        ServerMetricsWriter(tmp_path, {}),
        warnings.append,
    )
    scraper.scrape()  # (nothing listens there: a failure, counted)
    scraper.error = None  # a second failing scrape, whose error quotes a body echoing the key
    scraper.scrapes += 1
    scraper._failed(
        "GET http://127.0.0.1:1/metrics: invalid metric name: Bearer sk-very-secret-1234 echoed"
    )
    assert scraper.error is not None
    assert "sk-very-secret" not in scraper.error
    assert "Bearer ***" in scraper.error
    assert len(warnings) == 2
    assert "sk-very-secret" not in warnings[1]
    assert scraper.status()["status"] == "failed"


def test_a_refused_scrape_names_its_url_once_with_the_reason(tmp_path: Path) -> None:
    from veeksha.record.server_metrics import ServerMetricsWriter
    from veeksha.server.scraper import MetricsScraper

    url = "http://127.0.0.1:1/metrics"  # (nothing listens there)
    warnings: list[str] = []
    scraper = MetricsScraper(url, None, 1.0, 0, ServerMetricsWriter(tmp_path, {}), warnings.append)
    scraper.scrape()
    scraper.scrape()
    assert len(warnings) == 1  # (the first failure only)
    assert warnings[0].startswith(f"server metrics: GET {url}: Connection refused")
    assert warnings[0].count(url) == 1
    assert scraper.error == f"GET {url}: Connection refused (nothing listens there)"
    assert scraper.status()["failed"] == 2


def _vllm_page(delay: float = 0.0) -> type[BaseHTTPRequestHandler]:
    """An HTTP handler answering every GET with the vLLM page above, ``delay`` s late."""

    class Page(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            time.sleep(delay)
            body = VLLM.encode()
            self.send_response(200)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    return Page


def test_a_scrapes_time_is_when_its_answer_came_not_when_its_parse_ended(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A big server's page takes seconds to parse (~30 µs a line): its values are those of the
    # answer's arrival, and were stamped that much later (a 200,000-line page: 7 s late).
    import threading
    import time
    from http.server import ThreadingHTTPServer

    from veeksha.record.server_metrics import ServerMetricsWriter
    from veeksha.server import scraper as scraper_module

    parse = scraper_module.parse_metrics

    def slow_parse(text: str, pause: object = None) -> list:  # type: ignore[type-arg]
        time.sleep(0.4)  # (a long page's parse)
        return parse(text)

    monkeypatch.setattr(scraper_module, "parse_metrics", slow_parse)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _vllm_page())
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        writer = ServerMetricsWriter(tmp_path, {})
        t0 = time.monotonic_ns()
        url = f"http://127.0.0.1:{server.server_address[1]}/metrics"
        scraper = scraper_module.MetricsScraper(url, None, 1.0, t0, writer, print)
        scraper.scrape()
        took = (time.monotonic_ns() - t0) / 1e9
    finally:
        server.shutdown()
        server.server_close()
    (stamp,) = set(writer._columns[0])
    assert took >= 0.4
    assert stamp < took - 0.3  # the answer came before the parse, not at its end


def test_a_servers_place_is_added_to_every_samples_labels() -> None:
    from veeksha.server.scraper import parse_metrics, with_server_label

    page = "# TYPE vllm:num_requests_running gauge\n"
    page += 'vllm:num_requests_running{model_name="m"} 3\nup 1\n'
    samples = parse_metrics(page)
    labelled = with_server_label(samples, 1)
    assert [s[1] for s in labelled] == ['{"model_name":"m","server":"1"}', '{"server":"1"}']
    assert [s[:1] + s[2:] for s in labelled] == [s[:1] + s[2:] for s in samples]


def test_several_servers_share_a_round_stamped_when_the_last_had_answered(tmp_path: Path) -> None:
    # The second server answers 0.2 s after the first: a request sent between the two reads is
    # in neither round's count before it, so the round is stamped after both reads.
    import json
    import threading
    import time
    from http.server import ThreadingHTTPServer

    from veeksha.record.server_metrics import ServerMetricsWriter
    from veeksha.server.scraper import MetricsScraper

    servers = [ThreadingHTTPServer(("127.0.0.1", 0), _vllm_page(d)) for d in (0.0, 0.2)]
    for server in servers:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    urls = [f"http://127.0.0.1:{s.server_address[1]}/metrics" for s in servers]
    try:
        writer = ServerMetricsWriter(tmp_path, {})
        t0 = time.monotonic_ns()
        follower = MetricsScraper(urls[1], None, 1.0, t0, writer, print)
        scraper = MetricsScraper(urls[0], None, 1.0, t0, writer, print, followers=[follower])
        scraper.scrape()
        status = scraper.stop()
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()
    stamps = sorted(set(writer._columns[0]))
    assert len(stamps) == 2  # (one time a round: the scrape, then stop's last one)
    assert stamps[0] >= 0.2  # (after the slow second server had answered)
    labels = {json.loads(text).get("server") for text in writer._columns[2]}
    assert labels == {"0", "1"}
    assert [a["url"] for a in status["servers"]] == urls
    assert [a["scrapes"] for a in status["servers"]] == [2, 2]
