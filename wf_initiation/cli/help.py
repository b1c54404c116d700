"""`wfi help [TOPIC]`: the documentation installed with the package, so that an error naming a topic
(``wfi help deployment``) points at text every installed user has, not at a repository's files.

The topics are the documents of ``docs/`` (package data ``wf_initiation/docs/*.md``; from a source
checkout, its ``docs/``). Without a topic it lists them with their first heading.
"""

from __future__ import annotations

import argparse
import importlib.resources
import pathlib
from importlib.resources.abc import Traversable

from wf_initiation.cli import EXIT_OK, EXIT_USAGE, UserError


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``help``."""
    p = subparsers.add_parser(
        "help", help="print a topic of the documentation installed with wfi (or list the topics)",
        description="Print a document of the wf-initiation documentation installed with the package, e.g. "
        "`wfi help deployment` (the deployment file) or `wfi help cli` (every command and flag). Without a "
        "topic, list the topics.",
    )
    p.add_argument("topic", nargs="?", metavar="TOPIC", help="A topic, e.g. deployment, cli, webhooks, limits.")
    p.set_defaults(handler=_help)


def docs() -> Traversable:
    """The installed documentation: ``wf_initiation/docs`` in a wheel, else a source checkout's ``docs/``."""
    packaged = importlib.resources.files("wf_initiation") / "docs"
    if packaged.is_dir():
        return packaged
    return pathlib.Path(__file__).resolve().parents[2] / "docs"  # an editable install of a checkout


def topics() -> dict[str, Traversable]:
    """Topic name -> its document."""
    return {doc.name.removesuffix(".md"): doc for doc in docs().iterdir() if doc.name.endswith(".md")}


def _help(args: argparse.Namespace) -> int:
    found = topics()
    if args.topic is None:
        width = max(map(len, found), default=0)
        print("wfi help TOPIC prints one of these documents:")
        for name, doc in sorted(found.items()):
            print(f"  {name:<{width}}  {_title(doc)}")
        return EXIT_OK
    topic = args.topic.lower().removesuffix(".md").removeprefix("docs/")
    if topic not in found:
        raise UserError(f"no topic {args.topic!r}; the topics: {', '.join(sorted(found))}", EXIT_USAGE)
    print(found[topic].read_text(encoding="utf-8"), end="")
    return EXIT_OK


def _title(doc: Traversable) -> str:
    for line in doc.read_text(encoding="utf-8").splitlines():
        if line.startswith("# "):
            return line[2:].strip().replace("`", "")
    return ""
