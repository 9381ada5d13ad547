"""`manage.py check_provider`: timings against a local OpenAI-compatible server."""

from __future__ import annotations

import io
import socket
import ssl
import threading

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError, SystemCheckError

from reports.providers import check as provider_check
from reports.providers.check import CheckFailed, measure_connection
from tests.helpers import self_signed_certificate
from tests.providers.openai_server import KEY, OpenAIServer, error, point_at


@pytest.fixture
def openai_server(settings):
    server = OpenAIServer().start()
    point_at(settings, server.base_url)
    yield server
    server.stop()


def check(*args) -> str:
    out = io.StringIO()
    call_command("check_provider", *args, stdout=out)
    return out.getvalue()


def test_every_stage_is_measured_against_a_real_server(openai_server):
    output = check()
    assert f"Checking openai at {openai_server.base_url} (model test-model)" in output
    for label in ("DNS lookup", "TCP connect", "time to first byte", "time to first token"):
        assert f"  {label}" in output and "ms  ok (slow over" in output
    assert "plain http, no TLS" in output
    assert output.rstrip().splitlines()[-1].startswith("Nothing is slow")
    (received,) = openai_server.requests
    assert received.body["stream"] is True and received.body["max_tokens"] == 16


def test_the_slow_stage_is_named(openai_server, monkeypatch):
    monkeypatch.setitem(provider_check.THRESHOLDS_MS, "first_token", 0.0)
    output = check()
    assert "time to first token" in output and "SLOW" in output
    verdict = output.rstrip().splitlines()[-1]
    assert verdict.startswith("Slow: time to first token")
    assert "the model is slow to start writing" in verdict


def test_a_refused_key_fails_with_a_clear_message_and_no_secret(openai_server):
    openai_server.queue(error(401, f"Incorrect API key provided: {KEY}."))
    with pytest.raises(CommandError, match=r"provider_auth.*OPENAI_API_KEY") as failure:
        check()
    assert KEY not in str(failure.value)


def test_nothing_listening_fails_at_tcp_connect(settings):
    server = OpenAIServer().start()
    url = server.base_url
    server.stop()
    point_at(settings, url)
    with pytest.raises(CommandError, match="TCP connect failed"):
        check()


def test_the_simulated_provider_has_nothing_to_check():
    with pytest.raises(CommandError, match="makes no network calls"):
        check("--provider", "simulated")


@pytest.fixture
def certificate(tmp_path):
    return self_signed_certificate(tmp_path)


def server_context(certificate) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(*certificate)
    return context


@pytest.fixture
def tls_server(certificate):
    """A local server that completes TLS handshakes and nothing more."""
    context = server_context(certificate)
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(10)

    def serve():
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            try:
                context.wrap_socket(conn, server_side=True).close()
            except (OSError, ssl.SSLError):
                conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield listener.getsockname()[1], certificate[0]
    listener.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept()
    listener.close()
    thread.join(10)


def test_the_tls_handshake_is_measured_on_https(tls_server):
    port, cert_file = tls_server
    trusting = ssl.create_default_context(cafile=str(cert_file))
    stages = measure_connection(f"https://127.0.0.1:{port}/v1", ssl_context=trusting)
    assert [s.key for s in stages] == ["dns", "tcp", "tls"]
    assert all(s.ms >= 0 for s in stages)


def test_an_untrusted_certificate_fails_the_tls_stage(tls_server):
    port, _ = tls_server
    with pytest.raises(CheckFailed, match=r"TLS handshake failed: .*certificate verify failed"):
        measure_connection(f"https://127.0.0.1:{port}/v1")


def test_the_openai_provider_without_a_model_fails_the_system_checks(settings):
    settings.REPORTS_PROVIDER = "openai"
    settings.REPORTS_MODEL = ""
    with pytest.raises(SystemCheckError, match=r"reports.E001.*REPORTS_MODEL"):
        call_command("check", "--tag", "reports")
    settings.REPORTS_MODEL = "llama3.2"
    # Every task reserves money at the model's price: a model without one stops start-up too.
    with pytest.raises(SystemCheckError, match=r"reports.E002.*llama3.2"):
        call_command("check", "--tag", "reports")
    settings.REPORTS_PRICES = {
        **settings.REPORTS_PRICES,
        "llama3.2": {"input": 0, "output": 0, "cached_input": 0},
    }
    call_command("check", "--tag", "reports", stdout=io.StringIO())


def test_every_stage_is_measured_over_https(certificate, settings, monkeypatch):
    # The system's trust store, as OpenSSL reads it, is told about the test certificate.
    monkeypatch.setenv("SSL_CERT_FILE", str(certificate[0]))
    server = OpenAIServer(tls=server_context(certificate)).start()
    url = server.base_url
    try:
        point_at(settings, url)
        output = check()
    finally:
        server.stop()
    assert url.startswith("https://") and f"Checking openai at {url}" in output
    for label in ("DNS lookup", "TCP connect", "TLS handshake", "time to first token"):
        assert f"  {label}" in output
    assert "plain http" not in output
    assert len(server.requests) == 1  # the request itself went over TLS too
