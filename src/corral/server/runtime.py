"""Run the server (uvicorn) in this process, in the foreground or on a background thread."""

from __future__ import annotations

import threading
import time

import uvicorn

from corral.server.app import create_app
from corral.server.bootstrap import Credentials, ensure_credentials
from corral.server.settings import Settings
from corral.store.sql import open_store


class ServerThread:
    """The API server on a thread, so one process can also host the local agent (`corral up`)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        store = open_store(settings.effective_database_url)
        self.credentials: Credentials = ensure_credentials(store, settings.data_dir)
        app = create_app(settings, store)
        # A short graceful shutdown: agents' long-polls would otherwise hold it for their whole wait.
        config = uvicorn.Config(app, host=settings.host, port=settings.port, log_level="warning",
                                timeout_graceful_shutdown=2, access_log=False)
        self.server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self.server.run, name="corral-server", daemon=True)

    def start(self, timeout_s: float = 30.0) -> None:
        """Start and wait until the port is bound. Raises RuntimeError if it never comes up."""
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self.server.started:
            if not self._thread.is_alive():
                raise RuntimeError(f"the server could not start on {self.settings.host}:{self.settings.port}"
                                   " (is the port taken?)")
            if time.monotonic() > deadline:
                raise RuntimeError("the server did not start in time")
            time.sleep(0.05)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def stop(self, timeout_s: float = 10.0) -> None:
        self.server.should_exit = True
        self._thread.join(timeout=timeout_s)
