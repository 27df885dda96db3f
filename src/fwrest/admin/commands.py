"""The argv of ``fwrest users``, ``fwrest clients`` and ``fwrest lockouts`` (SPEC 13.6), kept
here so that ``fwrest.cli`` only adds them and hands their arguments over."""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["COMMANDS", "add_parsers", "run"]

COMMANDS = ("users", "clients", "lockouts")

_EDITS = {
    "users": (("list", None), ("add", "NAME"), ("passwd", "NAME"), ("remove", "NAME")),
    "clients": (("list", None), ("add", "ID"), ("rotate-secret", "ID"), ("remove", "ID")),
}


def add_parsers(sub: Any) -> None:
    """Add the three commands to ``fwrest``'s sub-parsers."""
    for command, actions in _EDITS.items():
        what = "user" if command == "users" else "client"
        parser = sub.add_parser(
            command,
            help=f"list, add, change or remove the {command} of an onAuthparams file",
            description=f"Edit the {command} of CONFIG's onAuthparams file (file:NAME.json) "
            "atomically; the running service uses the change at its next token request."
            + (" Passwords are read from the terminal, without echo." if what == "user" else "")
            + (" A new client secret is printed once." if what == "client" else ""),
        )
        parser.add_argument("config", metavar="CONFIG")
        parser.add_argument("action", choices=[a for a, _ in actions], metavar="ACTION",
                            help=" | ".join(f"{a} {n}" if n else a for a, n in actions))  # fmt: skip
        parser.add_argument("name", nargs="?", metavar=actions[1][1], help=f"the {what}")
        parser.add_argument("--server", metavar="NAME", help="the oAuth2 server section "
                            "whose file to edit (needed when several have one)")  # fmt: skip
        if what == "user":
            parser.add_argument("--password-stdin", action="store_true",
                                help="read the password from the first line of stdin")  # fmt: skip
    lockouts = sub.add_parser(
        "lockouts",
        help="list or lift brute-force lock-outs (sqlite and Redis state stores)",
        description="List the lock-outs in force in CONFIG's state store, or lift those of "
        "NAME (a user name or a client address), or all of them.",
    )
    lockouts.add_argument("config", metavar="CONFIG")
    lockouts.add_argument("action", choices=["list", "clear"], metavar="ACTION",
                          help="list | clear [NAME]")  # fmt: skip
    lockouts.add_argument("name", nargs="?", metavar="NAME", help="a user name or an address")


def run(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """Run one of :data:`COMMANDS`; returns the exit code."""
    if args.command == "lockouts":
        if args.action == "list" and args.name is not None:
            parser.error("lockouts list takes no NAME")
        from fwrest.admin import lockouts

        return lockouts.run(args.config, args.action, args.name)
    from fwrest.admin import users

    kind = users.USERS if args.command == "users" else users.CLIENTS
    if (args.action == "list") != (args.name is None):
        parser.error(
            f"{args.command} {args.action} "
            + ("takes no name" if args.action == "list" else "needs a name")
        )
    stdin = bool(getattr(args, "password_stdin", False))
    return users.run(kind, args.config, args.action, args.name, args.server, stdin)
