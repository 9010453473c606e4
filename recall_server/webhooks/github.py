"""GitHub deliveries -> what to write: thread IDs, thread state and one-line trigger summaries (pure).

`plan(event, body)` decodes only the fields it needs (msgspec Structs) and returns a Plan; the service
runs it in the delivery's transaction. A body it cannot read (a missing or mistyped field, not JSON) is
planned as filed raw, its summary naming what could not be read: a verified delivery is always kept.
Titles and summaries are cleaned to the API's one-line rule (text.one_line). The
table in README.md ("Ingest from GitHub") is this module in prose; tests/test_github_mapping.py
checks it against GitHub's published example payloads (tests/data/github/). One module although long:
it is that table, one planner per event, read beside the README's prose.

Thread IDs are computed, so an agent that knows a repository and a number can compute them too:

    thr_gh_<owner>_<repo>               the repository (pushes, CI off any PR, other events)
    thr_gh_<owner>_<repo>_pr_<n>        pull request n
    thr_gh_<owner>_<repo>_issue_<n>     issue n
    thr_gh_<org>                        an organization's events that name no repository

<owner> and <repo> are the names lowercased with `.` and `_` as `-` (GitHub allows only
[A-Za-z0-9._-] in them, so `_` appears in the ID only as a separator). When owner_repo would be
longer than 40 characters, or a name has any other character, owner_repo is its first 31
characters, `-`, and the first 8 hex digits of the SHA-256 of the lowercased "owner/repo".
"""

from __future__ import annotations

import hashlib
import re
from datetime import datetime
from typing import Literal

import msgspec
from msgspec import Struct

from recall_server import text

EVENT_PATTERN = r"^[a-z_]{1,64}\Z"
DELIVERY_PATTERN = r"^[A-Za-z0-9-]{1,64}\Z"
_EVENT = re.compile(EVENT_PATTERN)
_DELIVERY = re.compile(DELIVERY_PATTERN)
KEY_MAX = 40  # owner_repo; with gh_, _issue_ and a 12-digit number the ID body stays within 64
_SHORT = 31
_MAX_NUMBER = 10**12
_GITHUB_NAME = re.compile(r"^[a-z0-9._-]+\Z")
_NOT_ID = re.compile(r"[^a-z0-9-]")
_FAILED = {"failure", "timed_out", "startup_failure"}
_VERDICT = {"success": "passed", "cancelled": "was cancelled", "action_required": "needs action"}

# ---- IDs -----------------------------------------------------------------------------------


def _part(name: str) -> str:
    return _NOT_ID.sub("-", name.lower())


def repo_key(full_name: str) -> str:
    """owner/repo -> the owner_repo part of thread IDs (the rule in this module's docstring)."""
    owner, _, repo = full_name.lower().partition("/")
    key = f"{_part(owner)}_{_part(repo)}"
    if len(key) > KEY_MAX or not (_GITHUB_NAME.match(owner) and _GITHUB_NAME.match(repo)):
        key = f"{key[:_SHORT]}-{hashlib.sha256(full_name.lower().encode()).hexdigest()[:8]}"
    return key


class Unmapped(ValueError):
    """What the mapping could not read in a delivery (it is then filed raw)."""


def _number(n: int) -> int:
    if not 1 <= n < _MAX_NUMBER:
        raise Unmapped(f"an issue or pull request number must be 1 to {_MAX_NUMBER - 1}, got {n}")
    return n


def repo_thread(full_name: str) -> str:
    return f"thr_gh_{repo_key(full_name)}"


def pr_thread(full_name: str, number: int) -> str:
    return f"thr_gh_{repo_key(full_name)}_pr_{_number(number)}"


def issue_thread(full_name: str, number: int) -> str:
    return f"thr_gh_{repo_key(full_name)}_issue_{_number(number)}"


def org_thread(login: str) -> str:
    key = _part(login)
    if len(key) > KEY_MAX or not _GITHUB_NAME.match(login.lower()):
        key = f"{key[:_SHORT]}-{hashlib.sha256(login.lower().encode()).hexdigest()[:8]}"
    return f"thr_gh_{key}"


def one_line(value: str | None, limit: int = 200) -> str:
    """The API's one-line rule (text.one_line), at most `limit` characters."""
    return text.one_line(value, limit)


def is_event(value: str | None) -> bool:
    return bool(value and _EVENT.match(value))


def is_delivery(value: str | None) -> bool:
    return bool(value and _DELIVERY.match(value))


# ---- the fields read from payloads -----------------------------------------------------------


class User(Struct):
    login: str = "someone"


class Repository(Struct):
    full_name: str


class Organization(Struct):
    login: str


class Number(Struct):
    number: int


class PullRequest(Struct):
    number: int
    updated_at: datetime
    title: str = ""
    state: str = "open"
    merged: bool | None = None
    merged_at: str | None = None
    user: User | None = None


class IssuePullRequest(Struct):
    merged_at: str | None = None


class Issue(Struct):
    number: int
    updated_at: datetime
    title: str = ""
    state: str | None = "open"
    user: User | None = None
    pull_request: IssuePullRequest | None = None  # present when the issue is a pull request


class Comment(Struct):
    body: str | None = ""
    user: User | None = None
    path: str | None = None


class Review(Struct):
    state: str = ""
    body: str | None = ""
    user: User | None = None


class App(Struct):
    name: str = ""


class CheckRun(Struct):
    name: str = ""
    conclusion: str | None = None
    head_sha: str = ""
    pull_requests: list[Number] = []


class CheckSuite(Struct):
    conclusion: str | None = None
    head_sha: str = ""
    head_branch: str | None = None
    app: App | None = None
    pull_requests: list[Number] = []


class WorkflowRun(Struct):
    name: str | None = None
    conclusion: str | None = None
    head_sha: str = ""
    head_branch: str | None = None
    pull_requests: list[Number] = []


class Commit(Struct):
    id: str = ""
    message: str = ""


class Envelope(Struct):
    action: str | None = None
    repository: Repository | None = None
    organization: Organization | None = None
    sender: User | None = None


class PullRequestEvent(Envelope):
    pull_request: PullRequest | None = None


class IssuesEvent(Envelope):
    issue: Issue | None = None


class IssueCommentEvent(Envelope):
    issue: Issue | None = None
    comment: Comment | None = None


class ReviewEvent(Envelope):
    pull_request: PullRequest | None = None
    review: Review | None = None


class ReviewCommentEvent(Envelope):
    pull_request: PullRequest | None = None
    comment: Comment | None = None


class CheckRunEvent(Envelope):
    check_run: CheckRun | None = None


class CheckSuiteEvent(Envelope):
    check_suite: CheckSuite | None = None


class WorkflowRunEvent(Envelope):
    workflow_run: WorkflowRun | None = None


class PushEvent(Envelope):
    ref: str = ""
    after: str = ""
    deleted: bool = False
    commits: list[Commit] = []
    head_commit: Commit | None = None
    pusher: User | None = None


# ---- plans -----------------------------------------------------------------------------------


class ThreadState(Struct, frozen=True):
    """A pull request's or issue's state as of `updated_at`: applied only if newer than what was."""

    title: str
    summary: str
    status: str
    updated_at: datetime


class Plan(Struct, frozen=True):
    """What one delivery writes: a trigger (summary, on thread_id) and maybe the thread's new state."""

    outcome: Literal["filed", "ignored", "pong"]
    source: str
    content_type: str = "application/json"  # application/octet-stream for a raw delivery that is not JSON
    action: str | None = None
    thread_id: str | None = None
    thread_title: str = ""  # the thread's title and summary if the delivery has to create it
    thread_summary: str = ""
    state: ThreadState | None = None
    summary: str = ""


_DECODERS: dict[str, msgspec.json.Decoder] = {}


def _decode(body: bytes, type_: type[Envelope]) -> Envelope:
    decoder = _DECODERS.get(type_.__name__)
    if decoder is None:
        decoder = _DECODERS[type_.__name__] = msgspec.json.Decoder(type_)
    try:
        return decoder.decode(body)
    except msgspec.ValidationError as exc:
        raise Unmapped(str(exc)) from None
    except msgspec.DecodeError:
        raise Unmapped("not JSON (is the webhook's content type application/json?)") from None


def _need(value: object, field: str, event: str) -> object:
    if value is None:
        raise Unmapped(f"no `{field}`")
    return value


def _login(user: User | None) -> str:
    return one_line(user.login if user else "someone", 39)


def _pr_status(pr: PullRequest) -> str:
    return "merged" if pr.merged or pr.merged_at else "closed" if pr.state == "closed" else "open"


def _pr_state(repo: str, pr: PullRequest) -> ThreadState:
    status = _pr_status(pr)
    return ThreadState(title=one_line(pr.title, 120) or f"PR #{pr.number}",
                       summary=one_line(f"PR #{pr.number} in {repo} by {_login(pr.user)}, {status}"),
                       status=status, updated_at=pr.updated_at)


def _issue_state(repo: str, issue: Issue) -> ThreadState:
    kind = "PR" if issue.pull_request is not None else "Issue"
    merged = issue.pull_request is not None and issue.pull_request.merged_at
    status = "merged" if merged else "closed" if issue.state == "closed" else "open"
    return ThreadState(title=one_line(issue.title, 120) or f"{kind} #{issue.number}",
                       summary=one_line(f"{kind} #{issue.number} in {repo} by {_login(issue.user)}, {status}"),
                       status=status, updated_at=issue.updated_at)


def _verdict(conclusion: str | None) -> str:
    if conclusion in _FAILED:
        return "failed"
    return _VERDICT.get(conclusion or "", "finished")


def _on(repo: str, prs: list[Number], ref: str | None) -> tuple[str | None, str]:
    """The thread a CI result belongs to (the first pull request's, else none) and how to name it."""
    if prs:
        return pr_thread(repo, prs[0].number), f"PR #{prs[0].number}"
    return None, f"{repo}@{ref}" if ref else repo


def _filed(event: str, action: str | None, summary: str, thread_id: str, title: str,
           state: ThreadState | None = None) -> Plan:
    return Plan(outcome="filed", source=f"github.{event}", action=action, thread_id=thread_id,
                thread_title=one_line(state.title if state else title, 120),
                thread_summary=state.summary if state else one_line(title), state=state,
                summary=one_line(summary))


def plan(event: str, body: bytes) -> Plan:
    """What a delivery of `event` with this body writes (see the module docstring and docs/webhooks.md)."""
    if event == "ping":
        return Plan(outcome="pong", source="github.ping")  # nothing to keep, whatever it holds
    try:
        return _EVENTS.get(event, _other)(event, body)
    except Unmapped as exc:
        return _raw(event, body, str(exc))


def _raw(event: str, body: bytes, reason: str) -> Plan:
    """A delivery the mapping cannot read, filed as it came: on the thread of the repository (else the
    organization) it names, if one can be read from it, else on no thread."""
    try:
        doc = msgspec.json.decode(body)
        content_type = "application/json"
    except msgspec.DecodeError:
        doc, content_type = None, "application/octet-stream"
    repo, org, action = _field(doc, "repository", "full_name"), _field(doc, "organization", "login"), None
    if isinstance(doc, dict) and isinstance(doc.get("action"), str):
        action = one_line(doc["action"], 64) or None
    where = repo or org
    thread = repo_thread(repo) if repo else org_thread(org) if org else None
    summary = one_line(f"GitHub {event} delivery{f' in {where}' if where else ''}, not mapped: {reason}")
    title = where if repo else f"GitHub organization {org}" if org else ""
    return Plan(outcome="filed", source=f"github.{event}", content_type=content_type, action=action,
                thread_id=thread, thread_title=one_line(title, 120), thread_summary=one_line(title), summary=summary)


def _field(doc: object, name: str, inner: str) -> str | None:
    """doc[name][inner] when it is a non-empty string, else None."""
    value = doc.get(name) if isinstance(doc, dict) else None
    value = value.get(inner) if isinstance(value, dict) else None
    return value if isinstance(value, str) and value.strip() else None


def _repo(envelope: Envelope, event: str) -> str:
    return _need(envelope.repository, "repository", event).full_name  # type: ignore[union-attr]


def _pull_request(event: str, body: bytes) -> Plan:
    d = _decode(body, PullRequestEvent)
    repo, pr = _repo(d, event), _need(d.pull_request, "pull_request", event)
    state = _pr_state(repo, pr)
    if d.action == "closed":
        what = "merged" if state.status == "merged" else "closed without merging"
    else:
        what = (d.action or "updated").replace("_", " ")
    return _filed(event, d.action, f"PR #{pr.number} {what} by {_login(d.sender)}: {state.title}",
                  pr_thread(repo, pr.number), "", state)


def _issues(event: str, body: bytes) -> Plan:
    d = _decode(body, IssuesEvent)
    repo, issue = _repo(d, event), _need(d.issue, "issue", event)
    state = _issue_state(repo, issue)
    what = (d.action or "updated").replace("_", " ")
    return _filed(event, d.action, f"Issue #{issue.number} {what} by {_login(d.sender)}: {state.title}",
                  issue_thread(repo, issue.number), "", state)


def _issue_comment(event: str, body: bytes) -> Plan:
    d = _decode(body, IssueCommentEvent)
    repo, issue = _repo(d, event), _need(d.issue, "issue", event)
    comment = d.comment or Comment()
    is_pr = issue.pull_request is not None
    thread = pr_thread(repo, issue.number) if is_pr else issue_thread(repo, issue.number)
    verb = "" if d.action == "created" else f" {d.action}" if d.action else ""
    text = f"Comment{verb} on {'PR' if is_pr else 'issue'} #{issue.number} by {_login(comment.user or d.sender)}"
    if d.action != "deleted" and comment.body:
        text += f": {one_line(comment.body)}"
    return _filed(event, d.action, text, thread, "", _issue_state(repo, issue))


def _review(event: str, body: bytes) -> Plan:
    d = _decode(body, ReviewEvent)
    repo, pr = _repo(d, event), _need(d.pull_request, "pull_request", event)
    review = d.review or Review()
    verb = "" if d.action == "submitted" else f" {d.action}" if d.action else ""
    state = f" ({review.state.lower().replace('_', ' ')})" if review.state else ""
    text = f"Review{verb} on PR #{pr.number} by {_login(review.user or d.sender)}{state}"
    if review.body:
        text += f": {one_line(review.body)}"
    return _filed(event, d.action, text, pr_thread(repo, pr.number), "", _pr_state(repo, pr))


def _review_comment(event: str, body: bytes) -> Plan:
    d = _decode(body, ReviewCommentEvent)
    repo, pr = _repo(d, event), _need(d.pull_request, "pull_request", event)
    comment = d.comment or Comment()
    verb = "" if d.action == "created" else f" {d.action}" if d.action else ""
    text = f"Review comment{verb} on PR #{pr.number} by {_login(comment.user or d.sender)}"
    if comment.path:
        text += f" on {one_line(comment.path, 80)}"
    if d.action != "deleted" and comment.body:
        text += f": {one_line(comment.body)}"
    return _filed(event, d.action, text, pr_thread(repo, pr.number), "", _pr_state(repo, pr))


def _ignored(event: str, action: str | None) -> Plan:
    return Plan(outcome="ignored", source=f"github.{event}", action=action)


def _ci(event: str, action: str | None, repo: str, prs: list[Number], sha: str, branch: str | None,
        label: str, name: str, conclusion: str | None) -> Plan:
    thread, where = _on(repo, prs, branch or sha[:7] or None)
    text = f"{label} {_verdict(conclusion)} on {where}: {one_line(name, 80) or 'unnamed'} ({conclusion or 'none'})"
    if thread is None:
        return _filed(event, action, text, repo_thread(repo), repo)
    return _filed(event, action, text, thread, f"PR #{prs[0].number} in {repo}")


def _check_run(event: str, body: bytes) -> Plan:
    d = _decode(body, CheckRunEvent)
    if d.action != "completed":
        return _ignored(event, d.action)
    run = _need(d.check_run, "check_run", event)
    return _ci(event, d.action, _repo(d, event), run.pull_requests, run.head_sha, None, "CI", run.name,
               run.conclusion)


def _check_suite(event: str, body: bytes) -> Plan:
    d = _decode(body, CheckSuiteEvent)
    if d.action != "completed":
        return _ignored(event, d.action)
    suite = _need(d.check_suite, "check_suite", event)
    return _ci(event, d.action, _repo(d, event), suite.pull_requests, suite.head_sha, suite.head_branch,
               "Checks", suite.app.name if suite.app else "", suite.conclusion)


def _workflow_run(event: str, body: bytes) -> Plan:
    d = _decode(body, WorkflowRunEvent)
    if d.action != "completed":
        return _ignored(event, d.action)
    run = _need(d.workflow_run, "workflow_run", event)
    return _ci(event, d.action, _repo(d, event), run.pull_requests, run.head_sha, run.head_branch, "Workflow",
               run.name or "", run.conclusion)


def _push(event: str, body: bytes) -> Plan:
    d = _decode(body, PushEvent)
    repo = _repo(d, event)
    ref = d.ref.removeprefix("refs/heads/")
    ref = f"tag {d.ref.removeprefix('refs/tags/')}" if d.ref.startswith("refs/tags/") else ref
    who = _login(d.pusher if d.pusher and d.pusher.login != "someone" else d.sender)
    if d.deleted:
        text = f"Push deleted {ref} by {who}"
    else:
        n = len(d.commits)
        text = f"Push to {ref} by {who}: {n} commit{'' if n == 1 else 's'}, head {d.after[:7]}"
        if d.head_commit and d.head_commit.message:
            text += f" {one_line(d.head_commit.message, 120)}"
    return _filed(event, None, text, repo_thread(repo), repo)


def _other(event: str, body: bytes) -> Plan:
    """Any other event: a trigger on the repository's thread (or the organization's, if none)."""
    d = _decode(body, Envelope)
    what = f"GitHub {event.replace('_', ' ')}{' ' + d.action.replace('_', ' ') if d.action else ''}"
    if d.repository is not None:
        where = d.repository.full_name
        return _filed(event, d.action, f"{what} in {where} by {_login(d.sender)}", repo_thread(where), where)
    if d.organization is not None:
        where = d.organization.login
        return _filed(event, d.action, f"{what} in {where} by {_login(d.sender)}", org_thread(where),
                      f"GitHub organization {where}")
    return _ignored(event, d.action)


_EVENTS = {
    "pull_request": _pull_request,
    "issues": _issues,
    "issue_comment": _issue_comment,
    "pull_request_review": _review,
    "pull_request_review_comment": _review_comment,
    "check_run": _check_run,
    "check_suite": _check_suite,
    "workflow_run": _workflow_run,
    "push": _push,
}
