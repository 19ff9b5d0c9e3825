"""``GET /metrics`` of an engine in this process, as Prometheus scrapes it."""

from __future__ import annotations

from tests.support.inprocess import InProcessEngine


async def scrape(api: InProcessEngine, token: str | None = None) -> tuple[int, str]:
    """The status and the text exposition, with ``token`` (the superuser's if none)."""
    headers = {"Authorization": f"Bearer {token or api.token}"}
    async with api.client.get("/metrics", headers=headers) as answer:
        return answer.status, await answer.text()
