"""A RecordSink that marks run phases on Grafana dashboards as region annotations.

At a phase's start it posts an annotation (``POST /api/annotations``); at its end
it turns that annotation into a region ending there (``PATCH /api/annotations/:id``).
Credentials: the arguments, else ``GRAFANA_TOKEN`` or ``GRAFANA_USER`` and
``GRAFANA_PASSWORD`` from the environment (never logged).  If Grafana cannot be
reached or refuses, the sink logs one warning and stops posting for the rest of
the run: the load test goes on, unslowed.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from llmload.dashboards.grafana import connect, credential_from_env
from llmload.dashboards.names import PHASE_TAG, UID
from llmload.loadtests.redact import redact_url
from llmload.loadtests.run.sinks import NullSink

log = logging.getLogger(__name__)


class GrafanaAnnotations(NullSink):
    """Posts one region annotation per run phase, tagged so the dashboards find it."""

    def __init__(
        self,
        url: str,
        token: str | None = None,
        user: str | None = None,
        password: str | None = None,
        dashboard_uid: str | None = UID,
        tags: Sequence[str] = (PHASE_TAG,),
        run_label: str = "",
        timeout: float = 2.0,
    ) -> None:
        self.url = redact_url(url)
        self.dashboard_uid = dashboard_uid
        self.tags = list(tags)
        self.run_label = run_label
        self.disabled = False
        self.posted = 0
        if not (token or (user and password)):
            credential = credential_from_env()
            token = credential if isinstance(credential, str) else None
            user, password = credential if isinstance(credential, tuple) else (None, None)
        self._api = connect(url, token=token, user=user, password=password, timeout=timeout)
        self._open: dict[tuple[str, str], tuple[int, int]] = {}

    def _tags(self, name: str, mode: str) -> list[str]:
        extra = [f"phase:{name}", f"mode:{mode}"]
        if self.run_label:
            extra.append(f"run:{self.run_label}")
        return [*self.tags, *extra]

    def _text(self, name: str, mode: str) -> str:
        run = f" [{self.run_label}]" if self.run_label else ""
        return f"llmload phase {name} ({mode}){run}"

    def on_phase(self, name: str, mode: str, event: str, at: float) -> None:
        """Start or close the phase's annotation; never raises."""
        if self.disabled or event not in ("start", "end"):
            return
        ms = int(at * 1000)
        try:
            self._post(name, mode, event, ms)
        except Exception as exc:  # any failure: warn once, then stay out of the run's way
            self.disabled = True
            log.warning(
                "Grafana annotations disabled for this run: %s unreachable or refused (%s: %s)",
                self.url,
                type(exc).__name__,
                str(exc)[:200],
            )

    def _post(self, name: str, mode: str, event: str, ms: int) -> None:
        tags, text = self._tags(name, mode), self._text(name, mode)
        opened = self._open.pop((name, mode), None) if event == "end" else None
        if opened is not None:
            ann_id, start_ms = opened
            self._api.annotations.partial_update_annotation(
                ann_id, time_from=start_ms, time_to=ms, tags=tags, text=text
            )
        else:
            label = text if event == "start" else f"{text} ended"
            resp = self._api.annotations.add_annotation(
                dashboard_uid=self.dashboard_uid, time_from=ms, time_to=ms, tags=tags, text=label
            )
            if event == "start":
                self._open[(name, mode)] = (int(resp["id"]), ms)
        self.posted += 1

    def close(self) -> None:
        """Release the HTTP session."""
        self._open.clear()
        self._api.client.s.close()
