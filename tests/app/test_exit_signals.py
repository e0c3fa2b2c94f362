"""server.app.exit_signals: the app hears SIGTERM and SIGINT before the server's own handler acts.

Real signals, sent by the test to its own process, with a recording handler standing in for
the server's (pytest's main thread: signal handlers exist only there). The process's own
handlers are put back after every test.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Iterator
from types import FrameType

import pytest

from server.app import exit_signals
from server.app.exit_signals import EVENT_POLL_S, EXIT_SIGNALS, ExitSignals


@pytest.fixture(autouse=True)
def keep_handlers() -> Iterator[None]:
    saved = {sig: signal.getsignal(sig) for sig in EXIT_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


class ServerHandler:
    """What a server installs (uvicorn's handle_exit): notes the signals it got."""

    def __init__(self, heard: list[str]) -> None:
        self.heard = heard

    def __call__(self, sig: int, frame: FrameType | None) -> None:
        self.heard.append(f"server {signal.Signals(sig).name}")


def test_the_app_hears_the_signal_first_and_the_servers_handler_still_runs() -> None:
    heard: list[str] = []

    async def main() -> None:
        for sig in EXIT_SIGNALS:
            signal.signal(sig, ServerHandler(heard))
        exits = ExitSignals(lambda: heard.append("app"))
        assert exits.install() == [signal.SIGTERM, signal.SIGINT]
        os.kill(os.getpid(), signal.SIGTERM)  # this process: the handlers above run
        await asyncio.sleep(0.05)
        assert heard == ["server SIGTERM", "app"]  # scheduled first, run on the next loop turn
        os.kill(os.getpid(), signal.SIGINT)
        await asyncio.sleep(0.05)
        assert heard == ["server SIGTERM", "app", "server SIGINT", "app"]
        exits.uninstall()

    asyncio.run(main())


def test_uninstall_puts_the_servers_handlers_back() -> None:
    async def main() -> None:
        handler = ServerHandler([])
        signal.signal(signal.SIGTERM, handler)
        exits = ExitSignals(lambda: None)
        exits.install()
        assert signal.getsignal(signal.SIGTERM) != handler
        exits.uninstall()
        assert signal.getsignal(signal.SIGTERM) is handler

    asyncio.run(main())


def test_a_handler_installed_after_the_wrapper_is_left_alone() -> None:
    async def main() -> None:
        signal.signal(signal.SIGTERM, ServerHandler([]))
        exits = ExitSignals(lambda: None)
        exits.install()
        later = ServerHandler([])
        signal.signal(signal.SIGTERM, later)
        exits.uninstall()
        assert signal.getsignal(signal.SIGTERM) is later

    asyncio.run(main())


def test_nothing_is_wrapped_where_the_server_does_not_handle_the_signal() -> None:
    # Ignored (or the default action): the server does no graceful exit on it, and the app
    # must not turn a signal that would end the process into one that does not.
    async def main() -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, ServerHandler([]))
        exits = ExitSignals(lambda: None)
        assert exits.install() == [signal.SIGINT]
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_IGN
        exits.uninstall()

    asyncio.run(main())


def test_outside_the_main_thread_nothing_is_installed() -> None:
    before = {sig: signal.getsignal(sig) for sig in EXIT_SIGNALS}
    found: list[object] = []

    async def main() -> None:
        exits = ExitSignals(lambda: None)
        found.append(exits.install())
        exits.uninstall()

    thread = threading.Thread(target=asyncio.run, args=(main(),))
    thread.start()
    thread.join(5)
    assert found == [[]]
    assert {sig: signal.getsignal(sig) for sig in EXIT_SIGNALS} == before


def test_a_handler_added_with_asyncios_add_signal_handler_still_runs() -> None:
    # asyncio's add_signal_handler (hypercorn's way) leaves a Python handler that does nothing
    # and is woken through the loop's wakeup fd: wrapped, both the app and it hear the signal.
    heard: list[str] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, heard.append, "server")
        exits = ExitSignals(lambda: heard.append("app"))
        assert signal.SIGTERM in exits.install()
        os.kill(os.getpid(), signal.SIGTERM)
        await asyncio.sleep(0.05)
        assert sorted(heard) == ["app", "server"]
        exits.uninstall()
        loop.remove_signal_handler(signal.SIGTERM)

    asyncio.run(main())


def test_the_apps_lifespan_wraps_them_unless_the_server_tells_the_app_itself() -> None:
    from server.app import create_app
    from server.settings import Settings

    async def main(server_tells: bool) -> tuple[bool, bool]:
        server_handler = ServerHandler([])
        signal.signal(signal.SIGTERM, server_handler)
        app = create_app(Settings(_env_file=None, records=["none"]))
        app.lifecycle.server_tells_shutdown = server_tells  # server.serving's Server sets it
        async with app.lifespan():
            wrapped = signal.getsignal(signal.SIGTERM) is not server_handler
        return wrapped, signal.getsignal(signal.SIGTERM) is server_handler

    assert asyncio.run(main(server_tells=False)) == (True, True)  # wrapped, then put back
    assert asyncio.run(main(server_tells=True)) == (False, True)


def test_server_serving_tells_the_app_itself() -> None:
    from server.app import create_app
    from server.serving import server_for
    from server.settings import Settings

    app = create_app(Settings(_env_file=None, records=["none"]))
    assert app.lifecycle.server_tells_shutdown is False
    server_for(app)
    assert app.lifecycle.server_tells_shutdown is True


def test_a_worker_whose_supervisor_hears_sigterm_polls_its_shutdown_event(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """hypercorn's workers: SIGTERM has no Python handler there, and the supervisor sets the
    event it handed the worker (tests/e2e/test_any_server.py runs the real thing)."""
    shared = multiprocessing.get_context("spawn").Event()
    monkeypatch.setattr(exit_signals, "supervisor_shutdown_event", lambda: shared)
    heard: list[float] = []

    async def main() -> None:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        exits = ExitSignals(lambda: heard.append(time.monotonic()))
        exits.install()
        assert exits.watching_supervisor
        await asyncio.sleep(0.25)
        assert not heard
        shared.set()
        set_at = time.monotonic()
        await asyncio.sleep(EVENT_POLL_S * 3)
        assert len(heard) == 1
        assert heard[0] - set_at <= EVENT_POLL_S * 2
        exits.uninstall()
        assert not exits.watching_supervisor

    asyncio.run(main())


def test_a_process_with_a_python_sigterm_handler_or_no_supervisor_watches_no_event(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert exit_signals.supervisor_shutdown_event() is None  # pytest: no parent process

    async def main() -> None:
        signal.signal(signal.SIGTERM, ServerHandler([]))
        monkeypatch.setattr(exit_signals, "supervisor_shutdown_event", multiprocessing.Event)
        exits = ExitSignals(lambda: None)
        exits.install()
        assert not exits.watching_supervisor  # the signal is heard: no event is needed
        exits.uninstall()

    asyncio.run(main())
