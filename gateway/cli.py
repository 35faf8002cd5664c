"""The `gateway` command: serve, check, pull, schema, docs, models, demo-vlm."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from pathlib import Path

from engines.errors import ConfigInvalid

DEFAULT_CONFIG = Path(__file__).resolve().parent.parent / "configs" / "models.yaml"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gateway", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="serve the models of a config")
    serve.add_argument(
        "--config",
        type=Path,
        default=DEFAULT_CONFIG,
        help=f"models.yaml to serve (default: {DEFAULT_CONFIG})",
    )
    serve.add_argument("--host", help="override server.host")
    serve.add_argument("--port", type=int, help="override server.port")

    check = commands.add_parser("check", help="validate a config without serving it")
    check.add_argument("config", type=Path)

    pull = commands.add_parser(
        "pull",
        help="download (and convert, for a GGUF) the hf: models of a config",
        description="Download the hf: models a config declares into the Hugging Face cache "
        "(HF_HOME), with a progress bar per file; a branch is resolved to its newest commit.",
    )
    pull.add_argument(
        "--config", type=Path, default=DEFAULT_CONFIG, help=f"(default: {DEFAULT_CONFIG})"
    )
    pull.add_argument("models", nargs="*", metavar="MODEL", help="ids or aliases (default: all)")

    schema = commands.add_parser("schema", help="print the JSON Schema of models.yaml")
    schema.add_argument("--write", action="store_true", help="write it into schemas/")

    docs = commands.add_parser(
        "docs",
        help="rewrite the model keys' table of docs/config.md from MODEL_KEYS",
        description="Render the config reference's table of model keys from MODEL_KEYS "
        "(schemas/config.py) and the keys' words (docs/model-keys.yaml) into "
        "docs/config.md, between its model-keys markers.",
    )
    docs.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 when the table is stale"
    )

    models = commands.add_parser("models", help="list the models of a config")
    models.add_argument("--config", type=Path, default=DEFAULT_CONFIG)

    commands.add_parser(
        "demo-vlm",
        help="build (once, cached) the demo vision model and print its directory: SmolVLM's "
        "architecture around SmolLM2-135M with a random vision tower, for tests and demos",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "serve":
        return serve(args.config, args.host, args.port)
    if args.command == "schema":
        return schema(args.write)
    if args.command == "docs":
        return docs(args.check)
    if args.command == "pull":
        from gateway.control.pull import pull

        return pull(args.config, args.models)
    if args.command == "demo-vlm":
        from engines.vision.demo import build_demo_vlm

        print(build_demo_vlm())
        return 0
    # `models` lists what `check` validates: the same one line per model.
    return check(args.config)


def check(path: Path) -> int:
    """Exit 0 with a line per model when valid; exit 1 with every error otherwise.

    The same validation a reload applies, model sources included: a file `check` passes is
    one a reload takes. Then the state_dir's databases (the stored Responses', the ops
    page's history, the batches'): one that exists must open, pass SQLite's quick check
    and be writable (nothing is created). A warning on stderr for each file of state_dir or
    the KV cache that other users may read.
    """
    from gateway.batches.store import store_path as batches_path
    from gateway.control.config import summarize, validate_config
    from gateway.control.state import cache_summary, database_problem, open_files
    from gateway.openai.response_store import store_path
    from gateway.ops.activity.store import activity_path

    try:
        config = validate_config(path)
    except ConfigInvalid as invalid:
        for error in invalid.errors:
            print(error, file=sys.stderr)
        return 1
    base_dir = path.resolve().parent
    responses = store_path(config.server, base_dir)
    # A history that cannot be opened is kept in memory: said at start, and here before.
    batches = batches_path(config.server, base_dir)
    problems = [database_problem(p) for p in (responses, activity_path(responses), batches)]
    if problems := [p for p in problems if p]:
        for problem in problems:
            print(f"server.state_dir: {problem}", file=sys.stderr)
        return 1
    for line in summarize(config):
        print(line)
    print(cache_summary(config.server, base_dir))
    for warning in open_files(config.server, base_dir):
        print(f"warning: {warning}", file=sys.stderr)
    return 0


def schema(write: bool) -> int:
    from gateway.control.json_schema import SCHEMA_PATH, render_schema, write_schema

    if write:
        write_schema()
        print(f"wrote {SCHEMA_PATH}")
    else:
        print(render_schema(), end="")
    return 0


def docs(check_only: bool) -> int:
    """`--check`: exit 1 when docs/config.md's model keys differ from `MODEL_KEYS`."""
    from gateway.control.key_docs import DOCS_PATH, is_current, write_docs

    if check_only:
        if is_current(DOCS_PATH):
            return 0
        print(f"{DOCS_PATH} is stale: run `gateway docs`", file=sys.stderr)
        return 1
    print(f"{'wrote' if write_docs(DOCS_PATH) else 'unchanged:'} {DOCS_PATH}")
    return 0


def serve(path: Path, host: str | None, port: int | None) -> int:
    from engines.mlx.platform import reexec_with_openblas

    reexec_with_openblas()  # before mlx is imported: a preload only works at process start

    from gateway.http.connections import (
        BACKLOG,
        connection_cap,
        hold_fd_limit,
        make_protocol,
        raise_fd_limit,
    )

    fd_limit = raise_fd_limit()
    hold_fd_limit()  # before anything imports mlx-lm, which would lower it

    import uvicorn

    from engines.log import emit
    from engines.mlx import platform
    from gateway.app import create_app
    from gateway.control.config import load_config
    from gateway.http.exposure import bind_refusal, bind_warning
    from gateway.http.shutdown import DrainingServer
    from gateway.logs.repeats import log_library_errors
    from gateway.logs.setup import setup_logging
    from schemas.config import seconds, size_bytes
    from schemas.events import ServerStarted

    try:
        config = load_config(path)
    except ConfigInvalid as invalid:
        print(f"gateway: {path} is invalid, not serving:", file=sys.stderr)
        for error in invalid.errors:
            print(error, file=sys.stderr)
        return 1
    server = config.server
    host, port = host or server.host, port or server.port
    if refusal := bind_refusal(server, host):
        print(f"gateway: {refusal}", file=sys.stderr)
        return 1
    if warning := bind_warning(server, host):
        print(f"gateway: warning: {warning}", file=sys.stderr)
    setup_logging(server.log_level, server.log_file)
    log_library_errors()
    path_taken = platform.detect()
    app = create_app(config, path_taken, path, bind_host=host)
    store = app.state.responses_store
    if store.problem:
        print(f"gateway: warning: stored Responses unavailable: {store.problem}", file=sys.stderr)
    if problem := app.state.batch_store.problem:
        print(f"gateway: warning: /v1/files and /v1/batches answer 503: {problem}", file=sys.stderr)
    emit(
        ServerStarted(
            host=host,
            port=port,
            config=str(path),
            models=[m.id for m in config.models],
            platform=path_taken.as_dict(),
            responses_store=store.path,
            responses_store_problem=store.problem,
        )
    )
    uvicorn_config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_config=None,
        access_log=False,
        log_level="warning",
        # A request head larger than this is cut off with a 431 while it is still arriving;
        # past the connection cap a new connection gets a 503; a slow head, a 408.
        http=make_protocol(
            connection_cap(server.limits.max_connections, fd_limit),
            seconds(server.limits.header_timeout),
            size_bytes(server.limits.max_header_bytes),
            app.state.protocols.default.envelope,
        ),
        backlog=BACKLOG,
        # The drain (server.shutdown_grace) has already waited for requests by the time
        # uvicorn closes connections; this only bounds what is left after it.
        timeout_graceful_shutdown=5,
    )
    # SIGTERM drains: 503 to new requests, in-flight ones finish, models unload, exit 0.
    grace = lambda: app.state.registry.current.config.server.shutdown_grace  # noqa: E731
    DrainingServer(uvicorn_config, app.state.admission, grace, app.state.log_scope).run()
    leave(0)
    return 0


def leave(code: int) -> None:
    """End the process now that it has drained and every model has unloaded.

    MLX's own C++ threads can still be joinable while the interpreter tears down its static
    objects, and the C++ runtime then aborts ("terminate called without an active
    exception", exit 134) after a clean drain — a crash to a service manager. Nothing is
    left to finish: run the exit handlers (the log writer flushes its queue), flush the
    streams, and exit without those destructors.
    """
    import atexit

    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
