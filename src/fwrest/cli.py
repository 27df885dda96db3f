"""``fwrest``: argv, exit codes (0 ok, 1 a failure while running, 2 an invalid configuration or
a command refused before it acted: :data:`EXIT_CODES`), printing. No logic of its own."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from fwrest import __version__
from fwrest.admin import commands as admin
from fwrest.errors import ConfigError

__all__ = ["main"]

EXIT_OK, EXIT_FAILED, EXIT_CONFIG = 0, 1, 2
# what --help says of them (SPEC 13.6: a refused name, password or file of the users and
# clients commands exits 2; so does fwrest reload's missing or stale pid file)
EXIT_CODES = (
    "Exit codes: 0 success; 1 a failure while running (e.g. a state store that does not "
    "answer); 2 an invalid configuration, or a command refused before it changed anything (a "
    "bad argument, a bad or existing user or client name, an empty password, a file that is "
    "not valid JSON, a missing or stale pid file, StateStore=memory for a command that needs "
    "the store). fwrest store migrate --check: 1 when a migration is due."
)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fwrest",
        description="fwrest: a REST application server. Serve endpoints on HTTP(S) ports "
        "described by an INI or JSON configuration.",
        epilog=EXIT_CODES,
    )
    parser.add_argument("--version", action="version", version=f"fwrest {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    serve = sub.add_parser(
        "serve",
        help="start the service described by CONFIG",
        description="Start the service. Ctrl-C or SIGTERM stop it "
        "gracefully; a second signal forces; SIGHUP reloads it.",
    )
    serve.add_argument("config", metavar="CONFIG", help="an .ini or .json file")
    serve.add_argument(
        "--workers",
        type=int,
        default=1,
        metavar="N",
        help="worker processes, each serving every port (default 1); 0: serve in this "
        "process, without a supervisor (a debugger's breakpoints are hit)",
    )
    serve.add_argument(
        "--pid-file", metavar="PIDFILE", help="write the pid here while serving (fwrest reload)"
    )
    serve.add_argument(
        "--reload",
        action="store_true",
        help="reload when CONFIG, the repository's files or a certificate change (development)",
    )
    reload = sub.add_parser(
        "reload",
        help="reload the service whose pid PIDFILE holds (SIGHUP)",
        description="New workers start with the new code, configuration and certificates; "
        "the old ones drain. A configuration that fails is logged; the service goes on.",
    )
    reload.add_argument("pid_file", metavar="PIDFILE", help="the file of serve --pid-file")
    check = sub.add_parser(
        "check",
        help="validate CONFIG as a start would, bind nothing",
        description="Load and validate everything a start would (config, "
        "repository, named functions, certificates); print a summary.",
    )
    check.add_argument("config", metavar="CONFIG")
    routes = sub.add_parser("routes", help="list every registered route of CONFIG")
    routes.add_argument("config", metavar="CONFIG")
    openapi = sub.add_parser(
        "openapi",
        help="write the OpenAPI 3.1 document of CONFIG",
        description="Write the OpenAPI 3.1 document of one port: the first server's, "
        "or --server NAME's.",
    )
    openapi.add_argument("config", metavar="CONFIG")
    openapi.add_argument("-o", "--output", metavar="FILE", help="write to FILE, not stdout")
    openapi.add_argument("--server", metavar="NAME", help="the server section to describe")
    tokens = sub.add_parser(
        "tokens",
        help="act on the tokens of CONFIG's service (revoke a user's tokens)",
        description="Act on the tokens kept in the service's state store (sqlite or Redis).",
    )
    tokens_sub = tokens.add_subparsers(dest="tokens_command", metavar="ACTION", required=True)
    revoke = tokens_sub.add_parser(
        "revoke",
        help="revoke every token of a user (logout everywhere)",
        description="Revoke every token family of a user: their refresh tokens stop working "
        "at once, their access tokens on every worker and host within a second.",
    )
    revoke.add_argument("config", metavar="CONFIG")
    revoke.add_argument("--user", required=True, metavar="NAME", help="the user name (exact)")
    keys = sub.add_parser(
        "keys",
        help="rotate or list the token signing keys of CONFIG (SPEC 12.1)",
        description="The key set of the oAuth2 ports that sign with EdDSA, ES256 or RS256. "
        "rotate makes the published next key current (every worker and host signs with it "
        "within 1 s; the former key verifies until its tokens expired) and publishes a new "
        "next key; list shows the keys.",
    )
    keys.add_argument("action", choices=["rotate", "list"], metavar="{rotate,list}")
    keys.add_argument("config", metavar="CONFIG")
    store = sub.add_parser(
        "store",
        help="upgrade CONFIG's state store to this release's schema (SPEC 17.2)",
        description="migrate brings a sqlite store up to this release's schema in place, "
        "after copying the file beside itself; a Redis store needs no step. --check changes "
        "nothing. Exit codes: 0 current (or migrated), 1 a migration is due (--check), "
        "2 an error (a store written by a newer release among them).",
    )
    store_sub = store.add_subparsers(dest="store_command", metavar="ACTION", required=True)
    migrate = store_sub.add_parser(
        "migrate",
        help="migrate the state store (a sqlite file: a backup first)",
        description="Bring the sqlite state store up to this release's schema, a copy of "
        "the file beside it first; idempotent. --check: exit 0 when current, 1 when a "
        "migration is due, 2 on an error, changing nothing.",
    )
    migrate.add_argument("config", metavar="CONFIG")
    migrate.add_argument(
        "--check", action="store_true", help="say whether a migration is due; change nothing"
    )
    admin.add_parsers(sub)
    return parser


def _store_migrate(path: str, check: bool) -> int:
    from fwrest.config.loader import load_config
    from fwrest.store.migrate import migrate

    config = load_config(path)
    outcome = migrate(config.state_store, config.data_path, config.redis, check)
    for line in outcome.lines:
        print(line)
    if outcome.error:
        print(outcome.error, file=sys.stderr)
    return outcome.code


def _revoke_user(path: str, user: str) -> int:
    from fwrest.config.loader import load_config
    from fwrest.store import StoreError, UnconfirmedWrite, open_store
    from fwrest.store.audit import NOT_KEPT, command_audit, command_event
    from fwrest.store.families import revoke_user, user_name_problem
    from fwrest.store.schema import SchemaError

    config = load_config(path)
    if config.state_store == "memory":
        print(
            "fwrest: error: the state store is memory: the service keeps its tokens in its "
            "own process, out of this command's reach (and loses them when it stops); revoke "
            "through the running service's oauth2/revoke-user route, or set [HTTPSERVER] "
            "StateStore=sqlite or redis://...",
            file=sys.stderr,
        )
        return EXIT_CONFIG
    if not user:
        print("fwrest: error: --user needs a user name", file=sys.stderr)
        return EXIT_CONFIG
    problem = user_name_problem(user)
    if problem is not None:  # as oauth2/revoke-user answers it (400)
        print(f"fwrest: error: --user: {problem}", file=sys.stderr)
        return EXIT_CONFIG
    try:
        store = open_store(config.state_store, config.data_path, config.redis)
        try:  # the log where the service's audit lines go, open before the change (SPEC 13.5)
            level = config.tunables.rest_log_level
            with command_audit(store, level, config.log_file, config.log_format) as audit:
                count = revoke_user(store, user)
                event = command_event(
                    "revocation", "fwrest tokens revoke", user=user, families=count
                )
                kept = audit.record_now(event)
        finally:
            store.close()
    except UnconfirmedWrite as exc:  # kept by the primary alone: a failover could lose it
        print(
            f"fwrest: error: {exc}: the revocation may not be kept; run the command again",
            file=sys.stderr,
        )
        return EXIT_FAILED
    except SchemaError as exc:  # a newer release's store: an error as at start (SPEC 17.2)
        print(f"fwrest: error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except StoreError as exc:
        print(f"fwrest: error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    print(f"fwrest tokens: revoked {count} token families of user {user!r}")
    if not kept:
        print(NOT_KEPT, file=sys.stderr)
    return EXIT_OK


def _check(path: str) -> int:
    from fwrest._native import describe
    from fwrest.server import prepare
    from fwrest.server.binding import resolve_all
    from fwrest.server.build import check_schema, check_store_keys, probe_store
    from fwrest.store import shown_url

    plan = prepare(path)
    config = plan.config
    resolve_all(plan)  # a HostName the start could not resolve (binds nothing)
    unreachable = probe_store(config)
    # SPEC 17.2: a store of a newer release is the start's error; an older sqlite file, a note
    due = check_schema(config) if unreachable is None else None
    if unreachable is None:  # the key and key set kept in Redis, as the files are (SPEC 12.1)
        unreachable = check_store_keys(plan)
    print(f"fwrest check: {config.source}: OK")
    for port in plan.ports:
        cfg = port.config
        tls = cfg.tls.describe() if cfg.is_tls else "plain HTTP"
        auth = port.auth.scheme or "open"
        settings = port.auth_settings
        if settings is not None and settings.scheme == "oAuth2" and settings.signing_alg != "HS256":
            auth += f", tokens {settings.signing_alg}"  # SPEC 12.1
        print(f"  [{cfg.name}] {cfg.host}:{cfg.port} ({tls}, authorization: {auth})")
        for loc in port.locations:
            url = port.urls()[port.locations.index(loc)]
            print(
                f"    {url}  [{loc.config.name}] pool [{loc.pool_name}] "
                f"{len(loc.endpoints)} route(s)"
            )
    if config.monitor is not None:
        mon = config.monitor
        tls = f" ({mon.tls.describe()})" if mon.ssl_certificate is not None else ""
        print(f"  [APP_MONITOR] {mon.host}:{mon.port}{mon.api_path}{tls}")
    print(f"  state store: {shown_url(config.state_store)}; data path: {config.data_path}")
    print(f"  HTTP engine: {describe()}")  # FWREST_ENGINE (docs/engine.md)
    if unreachable is not None:
        print(f"warning: [HTTPSERVER] StateStore: the state store did not answer: {unreachable}")
    for warning in (*config.warnings, *plan.warnings, *([due] if due else [])):
        print(f"warning: {warning}")
    return EXIT_OK


def _routes(path: str) -> int:
    from fwrest.server import prepare

    plan = prepare(path)
    rows = []
    for port in plan.ports:
        for loc in port.locations:
            for method, pattern, handler in loc.router.routes():
                full = f"{port.config.scheme}://{port.config.host}:{port.config.port}"
                full += loc.full_path(pattern)
                rows.append((full, method, handler.endpoint.function, handler.endpoint.source))
        for known in port.well_known:  # an oAuth2 port's discovery documents at its root
            full = f"{port.config.scheme}://{port.config.host}:{port.config.port}{known.path}"
            rows.append((full, "GET", known.function, "native"))
    rows.sort()
    width = [max((len(r[i]) for r in rows), default=0) for i in range(3)]
    print(f"{'METHOD':<7} {'PATH':<{width[0]}}  {'FUNCTION':<{width[2]}}  SOURCE")
    for full, method, function, source in rows:
        print(f"{method:<7} {full:<{width[0]}}  {function:<{width[2]}}  {source}")
    return EXIT_OK


def _openapi(path: str, output: str | None, server: str | None) -> int:
    import json

    from fwrest.native.listing import build_openapi
    from fwrest.server import prepare

    plan = prepare(path)
    ports = plan.ports
    if server is not None:
        ports = [p for p in ports if p.config.name.lower() == server.lower()]
        if not ports:
            names = ", ".join(p.config.name for p in plan.ports)
            raise ConfigError(f"there is no server {server!r}; the servers are {names}.")
    port = ports[0]
    settings = port.auth_settings
    grants = None
    if settings is not None and settings.scheme == "oAuth2":
        from fwrest.auth.oauth2.discovery import grants_at_start

        grants = grants_at_start(settings, port.native.disable)  # as the route's flows
    doc = build_openapi(port, __version__, grants)
    text = json.dumps(doc, indent=2) + "\n"
    if output:
        try:
            with open(output, "w", encoding="utf-8") as fh:
                fh.write(text)
        except OSError as exc:
            # a bad argument, as --workers 0 is: one line and exit 2, never a traceback
            why = exc.strerror or type(exc).__name__
            print(
                f"fwrest: error: cannot write the OpenAPI document to {output} ({why}); "
                "give -o a file in a folder that exists and that you may write to.",
                file=sys.stderr,
            )
            return EXIT_CONFIG
        print(f"fwrest openapi: wrote {output} ({len(doc['paths'])} paths)", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return EXIT_OK


def _reload(pid_file: str) -> int:
    from pathlib import Path

    from fwrest.server.pidfile import PidFileError, send_reload

    try:
        pid = send_reload(Path(pid_file))
    except PidFileError as exc:
        print(f"fwrest: error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    print(f"fwrest reload: sent SIGHUP to pid {pid}; its log tells how the reload went")
    return EXIT_OK


def _keys(action: str, path: str) -> int:
    import time

    from fwrest.auth.oauth2.keyset import KeySetUnreachable
    from fwrest.server.keys import open_key_set
    from fwrest.store import StoreError
    from fwrest.store.audit import MEMORY_AUDIT, NOT_KEPT

    try:  # a store that does not answer: 1, as for tokens revoke and lockouts
        keyset = open_key_set(path)
    except (StoreError, KeySetUnreachable) as exc:
        print(f"fwrest: error: {exc}", file=sys.stderr)
        return EXIT_FAILED
    try:
        if action == "rotate":
            with keyset.audit() as audit:  # open before the rotation (SPEC 13.5)
                entries = keyset.rotate()
                kept = keyset.record_rotation(audit, entries)
            for e in entries:
                if e.current and e.alg in keyset.algs:
                    print(f"fwrest keys: new current {e.alg} key {e.kid} ({keyset.source.where})")
            for e in entries:
                if e.next and e.alg in keyset.algs:
                    print(f"fwrest keys: next {e.alg} key {e.kid} (published, current at the "
                          "next rotation)")  # fmt: skip
            if kept is None:
                print(MEMORY_AUDIT, file=sys.stderr)
            elif not kept:
                print(NOT_KEPT, file=sys.stderr)
        else:
            entries = keyset.entries()
        print(f"{'KID':<44}  {'ALG':<5}  {'CREATED':<20}  CURRENT")
        now = time.time()
        for e in entries:
            created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(e.created))
            drop = e.drop_at()
            state = (
                "yes"
                if e.current
                else "next (published; current at the next rotation)"
                if e.next
                else (
                    f"no (verifies until {time.strftime('%H:%M:%SZ', time.gmtime(drop))})"
                    if drop is not None and drop > now
                    else "no (dropped)"
                )
            )
            print(f"{e.kid:<44}  {e.alg:<5}  {created:<20}  {state}")
        for name in keyset.hs256_ports():
            print(f"note: [{name}] signs with HS256 (one secret key, never listed or rotated)")
    finally:
        keyset.close()
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command is None:
        _parser().print_help()
        return EXIT_CONFIG
    try:
        if args.command == "check":
            return _check(args.config)
        if args.command == "routes":
            return _routes(args.config)
        if args.command == "openapi":
            return _openapi(args.config, args.output, args.server)
        if args.command == "tokens":
            return _revoke_user(args.config, args.user)
        if args.command == "keys":
            return _keys(args.action, args.config)
        if args.command == "store":
            return _store_migrate(args.config, args.check)
        if args.command == "serve":
            from fwrest.server import serve
            from fwrest.server.pidfile import PidFileError
            from fwrest.server.service import MAX_WORKERS

            if not 0 <= args.workers <= MAX_WORKERS:
                print(
                    f"fwrest: error: --workers must be from 0 to {MAX_WORKERS}, got "
                    f"{args.workers} (0 serves in this process; one a core is the usual choice)",
                    file=sys.stderr,
                )
                return EXIT_CONFIG
            if args.reload and args.workers == 0:
                print(
                    "fwrest: error: --reload needs --workers 1 or more (--workers 0 serves in "
                    "this process, which has no supervisor to restart it)",
                    file=sys.stderr,
                )
                return EXIT_CONFIG

            try:
                return serve(
                    args.config, workers=args.workers, pid_file=args.pid_file, reload=args.reload
                )
            except PidFileError as exc:
                print(f"fwrest: error: {exc}", file=sys.stderr)
                return EXIT_CONFIG
        if args.command == "reload":
            return _reload(args.pid_file)
        if args.command in admin.COMMANDS:
            return admin.run(parser, args)
    except ConfigError as exc:
        print(f"fwrest: configuration error: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except KeyboardInterrupt:
        return EXIT_OK
    except BrokenPipeError:
        # the reader of the output went away (`fwrest routes CONFIG | head -1`): no traceback,
        # and none at exit either, when Python flushes what is left (the recipe of Python's
        # signal module documentation)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_FAILED
    return EXIT_CONFIG


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
