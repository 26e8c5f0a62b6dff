"""Create or update the generated dashboards in a Grafana (``POST /api/dashboards/db``)."""

from __future__ import annotations

from typing import Any

from grafana_client import GrafanaApi

from llmload.dashboards.build import DASHBOARDS

MESSAGE = "llmload: python -m llmload.dashboards push"


def payload(dashboard: dict[str, Any], folder_uid: str | None = None) -> dict[str, Any]:
    """The body Grafana's dashboard API expects: create, or overwrite the same uid."""
    body: dict[str, Any] = {
        "dashboard": {**dashboard, "id": None},
        "overwrite": True,
        "message": MESSAGE,
    }
    if folder_uid:
        body["folderUid"] = folder_uid
    return body


def push(api: GrafanaApi, folder_uid: str | None = None) -> list[dict[str, Any]]:
    """Push every dashboard; returns Grafana's responses (uid, url, version, status)."""
    return [api.dashboard.update_dashboard(payload(d.build(), folder_uid)) for d in DASHBOARDS]
