"""`dev.py up` / `wfi up` with the examples (issue 31, item 6): each copy of examples/ has its own live
sources and its own feed port, so two clones on one machine share neither a folder nor a port; a
kept port another program took is replaced, and every `wfi` command reads the copy the same way.
(The whole `wfi up --activate` of a copy: tests/integration/test_examples_up.py.)"""

from __future__ import annotations

import pathlib
import shutil
import socket
import urllib.request

from tests.support.paths import ROOT
from wf_initiation.cli._common import load
from wf_initiation.cli._example_sources import prepare_example_sources

FEEDS = ("content-calendar", "content-into")


def copy(tmp_path: pathlib.Path, name: str) -> pathlib.Path:
    folder = tmp_path / name
    shutil.copytree(ROOT / "examples", folder, ignore=shutil.ignore_patterns("*.db", ".wfi"))
    return folder / "deployment.yaml"


def feed_urls(deployment: object) -> set[str]:
    return {deployment.workflows[n]["overlay"]["item"]["feed"] for n in FEEDS}  # type: ignore[attr-defined]


def test_the_shipped_example_names_no_fixed_port_and_no_shared_folder() -> None:
    text = (ROOT / "examples" / "deployment.yaml").read_text()
    assert "/tmp/" not in text and "127.0.0.1:0/feed.xml" in text and "sqlite: .wfi/sources/orders.db" in text


def test_two_copies_get_their_own_sources_and_feed_ports_and_keep_them(tmp_path: pathlib.Path) -> None:
    one, two = copy(tmp_path, "clone-1"), copy(tmp_path, "clone-2")
    first, second = load(str(one)), load(str(two))
    assert first.connections["orders-db"].settings()["sqlite"] == str(one.parent / ".wfi" / "sources" / "orders.db")
    assert second.connections["content-sheets"].settings()["dir"] == str(two.parent / ".wfi" / "sources" / "sheets")
    [url_one], [url_two] = feed_urls(first), feed_urls(second)
    assert url_one != url_two and ":0/" not in url_one + url_two
    assert feed_urls(load(str(one))) == {url_one}, "every command reads the copy the same way"
    port = int((one.parent / ".wfi" / "sources" / "feed-port").read_text())
    assert url_one == f"http://127.0.0.1:{port}/feed.xml"


def test_up_serves_the_copy_s_feed_and_replaces_a_kept_port_another_program_took(tmp_path: pathlib.Path, capsys) -> None:
    path = copy(tmp_path, "clone")
    kept = load(str(path))
    [url] = feed_urls(kept)
    taken = int(url.rsplit(":", 1)[1].split("/")[0])
    with socket.socket() as squatter:  # another program on the kept port
        squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        squatter.bind(("127.0.0.1", taken))
        squatter.listen()
        served = prepare_example_sources(path, kept)
        [now] = feed_urls(served)
        assert now != url
        out = capsys.readouterr().out
        assert f"the kept feed port {taken} is taken" in out and f"created {path.parent / '.wfi/sources/orders.db'}" in out
        with urllib.request.urlopen(now, timeout=10) as response:
            assert b"<rss" in response.read()
    assert feed_urls(load(str(path))) == {now}, "the new port is kept for every later command"
    assert (path.parent / ".wfi" / "sources" / "orders.db").stat().st_size > 0
    assert (path.parent / ".wfi" / "sources" / "sheets" / "Content Calendar.csv").is_file()
