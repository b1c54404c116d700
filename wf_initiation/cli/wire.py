"""`wfi wire schema [NAME]`: the activation's wire contract as JSON Schema (docs/wire.md)."""

from __future__ import annotations

import argparse
import json

from . import EXIT_OK, EXIT_USAGE, UserError


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add ``wire``."""
    p = subparsers.add_parser(
        "wire", help="print the wire contract: the JSON Schema of every signal, update and query of the activation",
        description="Print the activation's wire contract (`wfi help wire`): for each handler its kind, who calls it, "
        "its arguments and its result as JSON Schema, with the contract's version. For a bridge in any language.",
    )
    verbs = p.add_subparsers(dest="verb", metavar="VERB", required=True)
    schema = verbs.add_parser("schema", help="the JSON Schema of every handler, or of one",
                              description="Print the contract as one JSON document, or one handler's schema.")
    schema.add_argument("name", nargs="?", metavar="NAME", help="A handler, e.g. deliver, deliver_signal, delivery.")
    schema.set_defaults(handler=_schema)


def _schema(args: argparse.Namespace) -> int:
    from wf_initiation.wire import schema

    if args.name is None:
        print(json.dumps(schema.contract(), indent=2, sort_keys=True))
        return EXIT_OK
    try:
        handler = schema.find(args.name)
    except KeyError as exc:
        raise UserError(str(exc.args[0]), EXIT_USAGE) from None
    print(json.dumps({"version": schema.WIRE_VERSION, **schema.handler_schema(handler)}, indent=2, sort_keys=True))
    return EXIT_OK
