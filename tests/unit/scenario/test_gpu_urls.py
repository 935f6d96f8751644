"""``server_metrics.gpu_urls``: the GPU exporters' addresses, host:port or URLs, made URLs of
their /metrics; what is not an address is refused at its item; an empty list keeps the hash."""

from __future__ import annotations

from tests.unit.scenario.helpers import load, only_issue
from veeksha.scenario.loader import scenario_hash


def test_addresses_become_metrics_urls() -> None:
    scenario = load(
        "server_metrics:\n  gpu_urls: [127.0.0.1:9400, 'http://node1:9401', "
        "'http://node2:9400/', 'https://gpu.example/dcgm/metrics', /dcgm/metrics]\n"
    )
    assert scenario.server_metrics.gpu_urls == [
        "http://127.0.0.1:9400/metrics",
        "http://node1:9401/metrics",
        "http://node2:9400/metrics",
        "https://gpu.example/dcgm/metrics",
        "/dcgm/metrics",  # (a path: on the server's own address, when the run knows it)
    ]


def test_what_is_not_an_address_is_refused_at_its_item() -> None:
    issue = only_issue("server_metrics: {gpu_urls: ['ftp://node1:9400']}")
    assert issue.path.startswith("server_metrics.gpu_urls")
    assert "give host:port (e.g. 127.0.0.1:9400) or an http(s) URL" in issue.message
    issue = only_issue("server_metrics: {gpu_urls: ['node1:port']}")
    assert issue.path.startswith("server_metrics.gpu_urls")
    assert "node1:port" in issue.message


def test_no_exporter_keeps_the_hash() -> None:
    assert scenario_hash(load("server_metrics: {gpu_urls: []}")) == "41a55509ee"
    assert scenario_hash(load("server_metrics: {gpu_urls: ['h:9400']}")) != "41a55509ee"
