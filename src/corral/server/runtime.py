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
        # Jobs' web UIs on their own port (origin); it serves only /proxy/jobs/... and shares the app's state.
        self.ui_server: uvicorn.Server | None = None
        self._ui_thread: threading.Thread | None = None
        if app.state.job_ui_app is not None:
            ui_config = uvicorn.Config(app.state.job_ui_app, host=settings.host, port=settings.effective_job_ui_port,
                                       log_level="warning", timeout_graceful_shutdown=2, access_log=False,
                                       lifespan="off")
            self.ui_server = uvicorn.Server(ui_config)
            self._ui_thread = threading.Thread(target=self.ui_server.run, name="corral-job-ui", daemon=True)

    def start(self, timeout_s: float = 30.0) -> None:
        """Start and wait until the ports are bound. Raises RuntimeError if either never comes up."""
        self._thread.start()
        self._wait(self.server, self._thread, f"the server could not start on {self.settings.host}:"
                   f"{self.settings.port} (is the port taken?)", timeout_s)
        if self.ui_server is not None and self._ui_thread is not None:
            self._ui_thread.start()
            try:
                self._wait(self.ui_server, self._ui_thread, f"the job-UI port {self.settings.host}:"
                           f"{self.settings.effective_job_ui_port} could not be opened (is it taken? set "
                           "CORRAL_JOB_UI_PORT to another port, or 0 to serve job UIs on the API port)", timeout_s)
            except RuntimeError:
                self.stop()
                raise

    @staticmethod
    def _wait(server: uvicorn.Server, thread: threading.Thread, failure: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not server.started:
            if not thread.is_alive():
                raise RuntimeError(failure)
            if time.monotonic() > deadline:
                raise RuntimeError("the server did not start in time")
            time.sleep(0.05)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive() and (self._ui_thread is None or self._ui_thread.is_alive())

    def stop(self, timeout_s: float = 10.0) -> None:
        if self.ui_server is not None:
            self.ui_server.should_exit = True
        self.server.should_exit = True
        self._thread.join(timeout=timeout_s)
        if self._ui_thread is not None and self._ui_thread.is_alive():
            self._ui_thread.join(timeout=timeout_s)
