"""``timeshard ui`` attacked the way another web page or a careless setup would, in raw HTTP.

Each request is written byte for byte (``Host``, ``Origin``, ``Sec-Fetch-Site`` and cookies as a
browser would send them for the attack), so nothing in between fixes it up. No Ray, no browser:
the app is served over the fakes of ``tests/test_ui.py``. Tests named for an attack assert what a
user relies on: the attack does nothing, and the answer says why in words.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from http.cookies import SimpleCookie
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestServer

from cluster.cli import main
from cluster.cli.ui import TOKEN_ENV, UiSource, make_app, page
from cluster.cli.ui.app import STATIC
from tests.certs import self_signed
from tests.test_ui import SILOS, TOKEN, FakeJobs, named
from tests.test_ui_flows import FakeFlows

CSP = "default-src 'self'; frame-ancestors 'none'"


@dataclass
class Answer:
    status: int
    headers: list[tuple[str, str]]
    body: bytes

    def header(self, name: str) -> str | None:
        found = [v for k, v in self.headers if k.lower() == name.lower()]
        return found[0] if found else None

    def all(self, name: str) -> list[str]:
        return [v for k, v in self.headers if k.lower() == name.lower()]

    def json(self) -> Any:
        return json.loads(self.body)


async def raw(server: TestServer, method: str, path: str, headers: dict[str, str] | None = None, body: bytes = b"",
              *, tls: ssl.SSLContext | None = None) -> Answer:
    """One request exactly as given (``Host`` too: default this server's 127.0.0.1 address), and its answer."""
    sent = {"Host": f"127.0.0.1:{server.port}", **(headers or {}), "Content-Length": str(len(body)), "Connection": "close"}
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port, ssl=tls)
    writer.write((f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in sent.items()) + "\r\n").encode() + body)
    await writer.drain()
    data = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    head, _, rest = data.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    answer_headers = [(k.strip(), v.strip()) for k, _, v in (line.partition(":") for line in lines)]
    if dict((k.lower(), v) for k, v in answer_headers).get("transfer-encoding") == "chunked":
        rest = dechunk(rest)
    return Answer(int(status_line.split()[1]), answer_headers, rest)


def dechunk(data: bytes) -> bytes:
    out = b""
    while data:
        size_line, _, data = data.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            break
        out, data = out + data[:size], data[size + 2:]
    return out


@pytest.fixture
def fake_jobs() -> FakeJobs:
    return FakeJobs([f"job-{i:03d}" for i in range(5)])


@pytest.fixture
async def serve(fake_jobs: FakeJobs) -> AsyncIterator[Any]:
    """``serve(**make_app options)``: a running dashboard over the fakes; closed after the test."""
    servers: list[TestServer] = []

    async def start(*, start_kwargs: dict[str, Any] | None = None, **options: Any) -> TestServer:
        app = make_app(UiSource(status=lambda: SILOS, jobs=fake_jobs, flows=FakeFlows([f"etl-{i}" for i in range(3)])),
                       **options)
        server = TestServer(app)
        await server.start_server(**_serve_options(), **(start_kwargs or {}))
        servers.append(server)
        return server

    yield start
    for server in servers:
        await server.close()


def _serve_options() -> dict[str, Any]:
    """What ``timeshard ui`` runs its server with (its access log), when this checkout has it."""
    try:
        from cluster.cli.ui.command import SERVE_OPTIONS
    except ImportError:
        return {}
    return dict(SERVE_OPTIONS)


async def csrf_of(server: TestServer, headers: dict[str, str] | None = None) -> str:
    """The anti-forgery value the page carries (what its script sends), or "" without one."""
    found = re.search(r'name="timeshard-csrf" content="([^"]*)"', (await raw(server, "GET", "/", headers)).body.decode())
    return found.group(1) if found else ""


async def page_post_headers(server: TestServer, headers: dict[str, str] | None = None) -> dict[str, str]:
    """The headers Chromium sends with the page's own ``fetch`` POST."""
    return {**(headers or {}), "Origin": f"http://127.0.0.1:{server.port}", "Sec-Fetch-Site": "same-origin",
            "Sec-Fetch-Mode": "cors", "Content-Type": "application/json", "X-Timeshard-CSRF": await csrf_of(server, headers)}


def actions(fake: FakeJobs) -> list[tuple[str, str]]:
    return [(c[0], c[1]) for c in fake.calls if c[0] in ("pause", "resume", "trigger", "delete")]


# --- 1. DNS rebinding: only the dashboard's own names are answered ---------------------------------

@pytest.mark.parametrize("host", ["rebind.example:{port}", "rebind.example", "127.0.0.1.nip.io:{port}",
                                  "localhost:{other}", "127.0.0.1:{other}", "", "evil.example:{port}@127.0.0.1"])
async def test_a_rebound_host_name_is_refused_and_reads_nothing(serve: Any, fake_jobs: FakeJobs, host: str) -> None:
    server = await serve()
    answer = await raw(server, "GET", "/api/jobs", {"Host": host.format(port=server.port, other=server.port + 1)})
    assert answer.status == 421, answer
    assert "host name" in answer.json()["error"] and "--allow-host" in answer.json()["error"]
    assert fake_jobs.calls == [], "refused before the cluster is asked anything"


@pytest.mark.parametrize("host", ["localhost:{port}", "127.0.0.1:{port}", "[::1]:{port}", "LOCALHOST:{port}"])
async def test_the_dashboards_own_addresses_are_answered(serve: Any, host: str) -> None:
    server = await serve()
    answer = await raw(server, "GET", "/api/jobs", {"Host": host.format(port=server.port)})
    assert answer.status == 200, answer
    assert [j["name"] for j in answer.json()["items"]][:2] == ["job-000", "job-001"]


async def test_allow_host_admits_a_reverse_proxys_name_and_only_that(serve: Any) -> None:
    server = await serve(allow_hosts=["dash.example.com", "other.example:8443"])
    for host, status in (("dash.example.com", 200), ("dash.example.com:443", 200), ("other.example:8443", 200),
                         ("other.example", 421), ("other.example:9999", 421), ("rebind.example", 421)):
        assert (await raw(server, "GET", "/api/overview", {"Host": host})).status == status, host


# --- 2. Forgery: a request from another page changes nothing ------------------------------------

FORGED = {
    "form post from another site": {"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site",
                                    "Content-Type": "application/x-www-form-urlencoded"},
    "no-cors fetch from another site": {"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site",
                                        "Sec-Fetch-Mode": "no-cors", "Content-Type": "text/plain"},
    "another port of this host (same-site)": {"Origin": "http://127.0.0.1:8265", "Sec-Fetch-Site": "same-site",
                                              "Content-Type": "text/plain"},
    "a sandboxed frame (Origin: null)": {"Origin": "null", "Content-Type": "text/plain"},
    "an old browser: no Origin, no Sec-Fetch-Site": {"Content-Type": "text/plain"},
    "same origin but without the page's header": {"Origin": "http://127.0.0.1:{port}", "Sec-Fetch-Site": "same-origin",
                                                  "Content-Type": "application/json"},
}


@pytest.mark.parametrize("how", sorted(FORGED))
@pytest.mark.parametrize("path", ["/api/jobs/job-001/pause", "/api/jobs/job-001/delete", "/api/jobs/job-001/trigger",
                                  "/api/flows/etl-1/cancel"])
async def test_a_forged_post_does_nothing(serve: Any, fake_jobs: FakeJobs, how: str, path: str) -> None:
    server = await serve()
    headers = {k: v.format(port=server.port) for k, v in FORGED[how].items()}
    answer = await raw(server, "POST", path, headers, b"note=x")
    assert answer.status == 403, (how, answer)
    assert answer.json()["error"], "the refusal says why"
    assert actions(fake_jobs) == [] and "job-001" in fake_jobs.jobs


async def test_the_pages_header_with_a_foreign_origin_or_a_stale_value_is_refused(serve: Any, fake_jobs: FakeJobs) -> None:
    server = await serve()
    own = await page_post_headers(server)
    for changed in ({"Origin": "http://evil.example"}, {"Sec-Fetch-Site": "cross-site"},
                    {"X-Timeshard-CSRF": "0" * 64}):
        answer = await raw(server, "POST", "/api/jobs/job-001/pause", {**own, **changed})
        assert answer.status == 403, (changed, answer)
    assert "reload" in answer.json()["error"], "a page from an earlier run is told to reload"
    assert actions(fake_jobs) == []
    assert (await raw(server, "POST", "/api/jobs/job-001/pause", own)).status == 200
    assert actions(fake_jobs) == [("pause", "job-001")]


async def test_with_a_token_a_cookie_alone_does_not_authorise_an_action(serve: Any, fake_jobs: FakeJobs) -> None:
    """A browser that ignores SameSite sends the cookie along with a forged POST: still refused."""
    server = await serve(token=TOKEN)
    cookie = session_cookie(await raw(server, "GET", f"/?token={TOKEN}"), server)
    forged = {"Cookie": f"{cookie.key}={cookie.value}", "Origin": "http://evil.example", "Content-Type": "text/plain"}
    assert (await raw(server, "POST", "/api/jobs/job-001/delete", forged)).status == 403
    assert (await raw(server, "POST", "/api/jobs/job-001/delete", {"Cookie": forged["Cookie"]})).status == 403
    assert actions(fake_jobs) == []
    own = await page_post_headers(server, {"Cookie": forged["Cookie"]})
    assert (await raw(server, "POST", "/api/jobs/job-001/delete", own)).status == 200
    # A script with the token needs no page: another page cannot set Authorization without asking first.
    assert (await raw(server, "POST", "/api/jobs/job-002/delete", {"Authorization": f"Bearer {TOKEN}"})).status == 200
    assert actions(fake_jobs) == [("delete", "job-001"), ("delete", "job-002")]


# --- 3. Framing, sniffing, referrers, inline script ----------------------------------------------

async def test_every_answer_forbids_framing_sniffing_and_referrers(serve: Any) -> None:
    server = await serve()
    secured = await serve(token=TOKEN)
    cases = [(server, "GET", "/", {}), (server, "GET", "/static/app.js", {}), (server, "GET", "/api/overview", {}),
             (server, "GET", "/api/shards?size=x", {}), (server, "GET", "/nothing-here", {}),
             (server, "GET", "/api/jobs", {"Host": "rebind.example"}), (server, "POST", "/api/jobs/job-001/pause", {}),
             (secured, "GET", "/", {}), (secured, "GET", f"/?token={TOKEN}", {})]
    for target, method, path, headers in cases:
        answer = await raw(target, method, path, headers)
        csp = answer.header("Content-Security-Policy") or ""
        assert csp.startswith(CSP), (path, answer.status, csp)
        assert (answer.header("X-Frame-Options"), answer.header("X-Content-Type-Options"),
                answer.header("Referrer-Policy")) == ("DENY", "nosniff", "no-referrer"), (path, answer.status)


def test_the_page_runs_under_its_policy_no_inline_script_or_style() -> None:
    shell = page()
    scripts = re.findall(r"<script\b[^>]*>", shell)
    assert scripts and all('src="static/' in s for s in scripts), scripts
    assert not re.search(r"<script\b[^>]*>\s*[^<\s]", shell), "an inline script would be blocked by the policy"
    for text in [shell, *(p.read_text() for p in STATIC.glob("*.js"))]:
        assert not re.search(r"""\son[a-z]+\s*=\s*['"]""", text), "inline event handlers are blocked by the policy"
        assert not re.search(r"""\bstyle\s*=\s*['"]|<style""", text), "inline styles are blocked by the policy"
        assert "javascript:" not in text and "eval(" not in text and "new Function" not in text


def test_markup_reaches_the_document_only_through_the_one_rendering_helper() -> None:
    """Escaping by construction: ts.render takes only html`...` markup; nothing else writes HTML."""
    writers = re.compile(r"\.innerHTML\s*=|\.outerHTML\s*=|insertAdjacentHTML|document\.write|\.setHTML")
    for path in sorted(STATIC.glob("*.js")):
        found = [line.strip() for line in path.read_text().splitlines() if writers.search(line)]
        if path.name == "app.js":
            assert found == ["element.innerHTML = markup.text;"], found
        else:
            assert found == [], (path.name, found)
        assert "ts.esc(" not in path.read_text(), "no hand-escaping left to forget"


# --- 4. Tokens ------------------------------------------------------------------------------------

def session_cookie(answer: Answer, server: TestServer) -> Any:
    jar: SimpleCookie = SimpleCookie()
    for value in answer.all("Set-Cookie"):
        jar.load(value)
    assert list(jar) == [f"timeshard_ui_{server.port}"], answer.all("Set-Cookie")
    return jar[f"timeshard_ui_{server.port}"]


@pytest.mark.parametrize("short", ["s3cret", "x" * 15])
def test_a_token_shorter_than_16_characters_is_refused(short: str) -> None:
    with pytest.raises(ValueError, match="at least 16"):
        make_app(UiSource(status=lambda: SILOS, jobs=FakeJobs([])), token=short)


@pytest.fixture
def no_cluster(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """``timeshard ui`` that never reaches Ray: connecting fails (exit 1) once its options were accepted."""
    import cluster.cli.jobs as cli_jobs

    tried: list[str] = []

    def refuse(namespace: str) -> Any:
        tried.append(namespace)
        raise cli_jobs._Failure("no cluster in this test")

    monkeypatch.setattr(cli_jobs, "_connect", refuse)
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    return tried


def test_the_command_refuses_a_short_token_with_a_clear_error(no_cluster: list[str], monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    monkeypatch.setenv(TOKEN_ENV, "short")
    assert main(["ui", "--host", "0.0.0.0"]) == 2
    err = capsys.readouterr().err
    assert f"${TOKEN_ENV}" in err and "at least 16" in err and "short" not in err.replace("shorter", "")
    monkeypatch.delenv(TOKEN_ENV)
    (tmp_path / "tokens").write_text("alice tooshort\n")
    assert main(["ui", "--host", "0.0.0.0", "--token-file", str(tmp_path / "tokens")]) == 2
    assert "line 1" in capsys.readouterr().err
    assert no_cluster == [], "refused before connecting"


def test_the_token_comes_from_the_environment_or_a_file(no_cluster: list[str], monkeypatch: pytest.MonkeyPatch,
                                                         tmp_path: Path) -> None:
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    assert main(["ui", "--host", "0.0.0.0"]) == 1  # accepted: it went on to connect
    monkeypatch.delenv(TOKEN_ENV)
    (tmp_path / "tokens").write_text(f"# the on-call tokens\nalice {TOKEN}\n\n{TOKEN}-second\n")
    assert main(["ui", "--host", "0.0.0.0", "--token-file", str(tmp_path / "tokens")]) == 1
    assert main(["ui", "--host", "0.0.0.0", "--token-file", str(tmp_path / "missing")]) == 2
    assert len(no_cluster) == 2


def test_the_token_options_help_says_ps_shows_token(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["ui", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    assert "--token-file" in shown and "sees it in `ps`" in shown and "--certfile" in shown and "--allow-host" in shown


async def test_a_token_in_the_address_is_exchanged_for_a_cookie_and_redirected_away(serve: Any) -> None:
    server = await serve(token=TOKEN)
    first = await raw(server, "GET", f"/?token={TOKEN}", {"Sec-Fetch-Site": "none"})
    assert first.status == 303 and first.header("Location") == "./", first
    cookie = session_cookie(first, server)
    assert TOKEN not in "".join(first.all("Set-Cookie")) and TOKEN not in cookie.value
    assert cookie["httponly"] is True and cookie["samesite"] == "Strict" and cookie["path"] == "/"
    assert not cookie["secure"], "plain HTTP: a Secure cookie would never come back"
    with_cookie = {"Cookie": f"{cookie.key}={cookie.value}"}
    assert (await raw(server, "GET", "/", with_cookie)).status == 200
    assert (await raw(server, "GET", "/api/jobs", with_cookie)).status == 200
    deeper = await raw(server, "GET", f"/api/jobs?prefix=job-&token={TOKEN}&size=2")
    assert deeper.status == 303 and deeper.header("Location") == "./jobs?prefix=job-&size=2"


async def test_the_cookie_opens_only_this_dashboard_and_only_this_run(serve: Any) -> None:
    server = await serve(token=TOKEN)
    cookie = session_cookie(await raw(server, "GET", f"/?token={TOKEN}"), server)
    for sent in (f"token={TOKEN}", f"{cookie.key}={TOKEN}", f"timeshard_ui_{server.port + 1}={cookie.value}"):
        assert (await raw(server, "GET", "/api/jobs", {"Cookie": sent})).status == 401, sent
    restarted = await serve(token=TOKEN)  # another process: another secret
    moved = {"Cookie": f"timeshard_ui_{restarted.port}={cookie.value}"}
    assert (await raw(restarted, "GET", "/api/jobs", moved)).status == 401
    assert (await raw(server, "GET", "/?token=wrong-but-long-enough")).status == 401


async def test_a_token_link_followed_from_another_site_moves_on_without_it(serve: Any) -> None:
    """A redirect would stay that site's navigation, which a Strict cookie does not join: the page
    moves on itself (tests/test_ui_page.py follows such a link in Chromium)."""
    server = await serve(token=TOKEN)
    answer = await raw(server, "GET", f"/?token={TOKEN}", {"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate"})
    assert answer.status == 200 and TOKEN not in answer.body.decode()
    assert 'url=./"' in answer.body.decode() and session_cookie(answer, server).value


async def test_the_token_never_reaches_the_access_log(serve: Any, caplog: pytest.LogCaptureFixture) -> None:
    server = await serve(token=TOKEN)
    with caplog.at_level(logging.INFO):
        await raw(server, "GET", f"/?token={TOKEN}")
        await raw(server, "GET", f"/api/jobs?token={TOKEN}&prefix=job-")
        await raw(server, "GET", "/api/jobs", {"Authorization": f"Bearer {TOKEN}"})
        await raw(server, "GET", "/?token=wrong-but-long-enough")
        await asyncio.sleep(0.1)
    logged = caplog.text
    assert "/api/jobs" in logged, "the access log is on"
    assert TOKEN not in logged and "wrong-but-long-enough" not in logged, logged


async def test_under_tls_the_cookie_is_secure(serve: Any, tmp_path: Path) -> None:
    from cluster.cli.ui.command import tls_of  # what --certfile/--keyfile build

    cert, key = self_signed(tmp_path)
    context = tls_of(type("Args", (), {"certfile": str(cert), "keyfile": str(key)})())
    assert context is not None
    server = await serve(token=TOKEN, start_kwargs={"ssl": context})
    client = ssl.create_default_context(cafile=str(cert))
    client.check_hostname = False
    first = await raw(server, "GET", f"/?token={TOKEN}", tls=client)
    assert first.status == 303 and session_cookie(first, server)["secure"] is True


def test_tls_needs_both_files(no_cluster: list[str], capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["ui", "--certfile", str(tmp_path / "cert.pem")]) == 2
    assert "--keyfile" in capsys.readouterr().err
    (tmp_path / "cert.pem").write_text("not a certificate")
    assert main(["ui", "--certfile", str(tmp_path / "cert.pem"), "--keyfile", str(tmp_path / "cert.pem")]) == 2
    assert "cannot load" in capsys.readouterr().err and no_cluster == []


async def test_loopback_without_a_token_keeps_working_behind_the_same_guards(serve: Any, fake_jobs: FakeJobs) -> None:
    server = await serve()
    assert (await raw(server, "GET", "/api/jobs")).status == 200
    assert (await raw(server, "GET", "/api/jobs", {"Host": "rebind.example"})).status == 421
    assert (await raw(server, "POST", "/api/jobs/job-001/pause", {"Content-Type": "text/plain"})).status == 403
    assert (await raw(server, "POST", "/api/jobs/job-001/pause", await page_post_headers(server))).status == 200


# --- 5. The API answers what the page shows, capped, in words; actions say who and why ----------

async def test_the_jobs_api_never_returns_a_jobs_data_or_metadata(serve: Any, fake_jobs: FakeJobs) -> None:
    job = fake_jobs.jobs["job-001"]
    fake_jobs.jobs["job-001"] = replace(job, job=replace(job.job, data={"api_key": "PAYLOAD-SECRET"},
                                                         metadata={"owner": "METADATA-SECRET"}))
    server = await serve()
    bodies = [(await raw(server, "GET", path)).body.decode() for path in
              ("/api/jobs", "/api/jobs?prefix=job-001&count=1", "/api/jobs/job-001")]
    bodies.append((await raw(server, "POST", "/api/jobs/job-001/pause", await page_post_headers(server), b"{}")).body.decode())
    assert all("job-001" in b for b in bodies), bodies
    for body in bodies:
        assert "PAYLOAD-SECRET" not in body and "METADATA-SECRET" not in body, body
        assert '"data"' not in body and '"metadata"' not in body


async def test_every_size_parameter_is_capped(serve: Any) -> None:
    server = await serve()
    for path in ("/api/flows?size=100000", "/api/shards?size=100000", "/api/jobs?size=100000"):
        answer = await raw(server, "GET", path)
        assert answer.status == 200 and answer.json()["size"] == 200, (path, answer.json().get("size"))
    for path in ("/api/shards?page=" + "9" * 30, "/api/flows?page=" + "9" * 30, "/api/flows?size=" + "9" * 5000):
        answer = await raw(server, "GET", path)
        assert answer.status == 400 and answer.json()["error"].split(":")[0] in ("page", "size"), (path, answer)


@pytest.mark.parametrize(("method", "path", "status", "words"), [
    ("GET", "/api/shards?size=x", 400, "size: expected an integer"),
    ("GET", "/api/shards?sort=nonsense", 400, "sort: expected one of"),
    ("GET", "/nothing-here", 404, "nothing here"),
    ("GET", "/static/nothing.js", 404, "nothing here"),
    ("GET", "/api/flows/etl-1/cancel", 405, "GET is not allowed"),
    ("DELETE", "/api/jobs/job-001", 405, "not allowed"),
])
async def test_errors_are_json_with_a_reason_in_words(serve: Any, method: str, path: str, status: int, words: str) -> None:
    server = await serve()
    answer = await raw(server, method, path, await page_post_headers(server) if method != "GET" else {})
    assert answer.status == status and (answer.header("Content-Type") or "").startswith("application/json"), answer
    assert words in answer.json()["error"], answer.json()


async def test_refusals_are_json_with_a_reason_in_words(serve: Any) -> None:
    server = await serve(token=TOKEN)
    own = await page_post_headers(server, {"Authorization": f"Bearer {TOKEN}"})
    for headers, body, status, words in (({}, b"", 401, "needs its token"), ({"Host": "x.example"}, b"", 421, "host name"),
                                         (own, b"x" * 100_000, 413, "too large"),
                                         (own, b"not json", 400, "must be JSON")):
        method, path = ("GET", "/api/jobs") if not body else ("POST", "/api/jobs/job-001/pause")
        answer = await raw(server, method, path, headers, body)
        assert answer.status == status and words in answer.json()["error"], (status, answer)


async def test_a_pause_records_its_note_and_who(serve: Any, fake_jobs: FakeJobs, caplog: pytest.LogCaptureFixture) -> None:
    server = await serve(user="alice@ops")
    with caplog.at_level(logging.INFO, logger="timeshard.ui.audit"):
        answer = await raw(server, "POST", "/api/jobs/job-001/pause?namespace=ns", await page_post_headers(server),
                           json.dumps({"note": "disk full on db-2"}).encode())
        assert answer.status == 200, answer
        assert fake_jobs.paused_with == {"note": "disk full on db-2", "by": "alice@ops"}
        deleted = await raw(server, "POST", "/api/jobs/job-002/delete", await page_post_headers(server),
                            json.dumps({"note": "replaced by job-9"}).encode())
        assert deleted.status == 200
    lines = [r.getMessage() for r in caplog.records if r.name == "timeshard.ui.audit"]
    assert lines == ["pause job 'job-001' (namespace 'ns', app_id 'default') by alice@ops (note: 'disk full on db-2'): done",
                     "delete job 'job-002' (namespace 'default', app_id 'default') by alice@ops (note: 'replaced by job-9'): done"]
    too_long = await raw(server, "POST", "/api/jobs/job-003/pause", await page_post_headers(server),
                         json.dumps({"note": "x" * 201}).encode())
    assert too_long.status == 400 and too_long.json()["field"] == "note"


async def test_a_tokens_label_says_who_acted(serve: Any, fake_jobs: FakeJobs) -> None:
    from cluster.cli.ui import UiToken

    server = await serve(tokens=[UiToken(TOKEN, "bob"), UiToken(TOKEN + "-carol", None)], user="ops-team")
    for token, who in ((TOKEN, "bob"), (TOKEN + "-carol", "ops-team")):
        fake_jobs.jobs["job-001"] = named("job-001")
        answer = await raw(server, "POST", "/api/jobs/job-001/pause", {"Authorization": f"Bearer {token}"})
        assert answer.status == 200 and fake_jobs.paused_with["by"] == who


def test_a_tokens_repr_never_shows_it() -> None:
    from cluster.cli.ui import UiToken

    assert TOKEN not in repr(UiToken(TOKEN, "bob")) and TOKEN not in str([UiToken(TOKEN)])
