"""Workers and the reports they file."""

from __future__ import annotations

from typing import Any

from litestar import Response, delete, get, post
from litestar.params import FromPath, JSONBody

from recall_server import spill
from recall_server.models import (
    CreateReport,
    CreateWorker,
    ReportPage,
    ReportView,
    WorkerView,
)
from recall_server.routes import (
    Budget,
    Caller,
    Cursor,
    IdempotencyKey,
    LabelFilter,
    Limit,
    paged,
    problems,
    sent,
    serve_content,
)


@post("/workers", status_code=201, responses=problems(400, 401, 403, 409, 413, 422, 503), operation_id="CreateWorker")
async def create_worker(
    data: JSONBody[CreateWorker], request: Caller, idempotency_key: IdempotencyKey = None
) -> Response[WorkerView]:
    return sent(await request.service.writes.create_worker(request.cred, data, idempotency_key))


@get("/workers/{worker_id:str}", responses=problems(400, 401, 404, 410, 503), operation_id="GetWorker")
async def get_worker(
    worker_id: FromPath[str], request: Caller, budget: Budget = spill.DEFAULT_BUDGET
) -> WorkerView:
    return await request.service.views.get_worker(request.cred, worker_id, budget)


@delete("/workers/{worker_id:str}", responses=problems(401, 403, 404, 503), operation_id="DeleteWorker")
async def delete_worker(worker_id: FromPath[str], request: Caller) -> None:
    """Erase the worker; its reports stay (they are about threads); the ID is retired."""
    await request.service.writes.delete(request.cred, "worker", worker_id)


@get("/workers/{worker_id:str}/reports", responses=problems(400, 401, 404, 410, 503), operation_id="ListReports")
async def list_reports(
    worker_id: FromPath[str],
    request: Caller,
    labels: LabelFilter,
    cursor: Cursor = None,
    limit: Limit = 50,
) -> Response[ReportPage]:
    return paged(request, await request.service.views.list_reports(request.cred, worker_id, labels, cursor, limit))


@post("/workers/{worker_id:str}/reports", status_code=201,
      responses=problems(400, 401, 403, 404, 409, 410, 413, 422, 503), operation_id="CreateReport")
async def create_report(
    worker_id: FromPath[str], data: JSONBody[CreateReport], request: Caller,
    idempotency_key: IdempotencyKey = None,
) -> Response[ReportView]:
    return sent(await request.service.writes.create_report(request.cred, worker_id, data, idempotency_key))


@get("/reports/{report_id:str}", responses=problems(400, 401, 404, 410, 503), operation_id="GetReport")
async def get_report(
    report_id: FromPath[str], request: Caller, budget: Budget = spill.DEFAULT_BUDGET
) -> ReportView:
    return await request.service.views.get_report(request.cred, report_id, budget)


@get("/reports/{report_id:str}/body", responses=problems(401, 404, 410, 416, 503), operation_id="GetBody")
async def get_body(
    report_id: FromPath[str], request: Caller
) -> Response[bytes]:
    return serve_content(request, await request.service.views.get_body(request.cred, report_id))


@delete("/reports/{report_id:str}", responses=problems(401, 403, 404, 503), operation_id="DeleteReport")
async def delete_report(report_id: FromPath[str], request: Caller) -> None:
    """Erase the report and its body; the ID is retired."""
    await request.service.writes.delete(request.cred, "report", report_id)


ROUTES: list[Any] = [create_worker, get_worker, delete_worker, list_reports, create_report, get_report, get_body,
                     delete_report]
