"""The published OpenAPI document: Litestar's schema, corrected where Litestar falls short."""

from __future__ import annotations

from typing import Any

import yaml

from recall_server.app import create_app
from recall_server.config import Settings


def document() -> dict[str, Any]:
    app = create_app(Settings(database_url="postgresql://unused"))
    return app.openapi_schema.to_schema()


def document_yaml() -> str:
    return yaml.safe_dump(document(), sort_keys=False, allow_unicode=True, width=120)
