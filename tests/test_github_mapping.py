"""webhooks/github.py and webhooks/signing.py: thread IDs, summaries and signatures (pure), and GitHub's
published example payloads mapped where README's table says."""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from pathlib import Path

import pytest

from recall_server import auth, ids
from recall_server.webhooks import github, signing

DATA = Path(__file__).resolve().parent / "data" / "github"
ONE_LINE = re.compile(r"^[^\x00-\x1f\x7f]*$")


def example(name: str) -> bytes:
    return (DATA / f"{name}.json").read_bytes()


# ---- signatures ------------------------------------------------------------------------------

# docs.github.com, "Validating webhook deliveries": the test values.
VECTOR_SECRET = "It's a Secret to Everybody"
VECTOR_BODY = b"Hello, World!"
VECTOR_SIGNATURE = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"


def test_githubs_documented_signature_test_vector() -> None:
    assert signing.sign(VECTOR_SECRET, VECTOR_BODY) == VECTOR_SIGNATURE


def test_the_padded_keys_give_the_same_hmac_as_the_secret() -> None:
    """What recall_hook_verify computes in SQL (sha256 of the padded keys) is HMAC-SHA256."""
    ipad, opad = auth.padded_keys(VECTOR_SECRET)
    assert "sha256=" + signing.mac(ipad, opad, VECTOR_BODY).hex() == VECTOR_SIGNATURE
    long_secret = "x" * 100  # longer than a block: hashed first, as RFC 2104 says
    ipad, opad = auth.padded_keys(long_secret)
    assert signing.mac(ipad, opad, b"body") == hmac.new(long_secret.encode(), b"body", hashlib.sha256).digest()


@pytest.mark.parametrize("header", [None, "", "sha1=" + "0" * 40, "sha256=xyz", "sha256=" + "0" * 63,
                                    VECTOR_SIGNATURE + "00", "SHA256=" + "0" * 64])
def test_malformed_signature_headers_carry_no_mac(header: str | None) -> None:
    assert signing.parse(header) is None


def test_new_hooks_are_unguessable_and_well_formed() -> None:
    made = {(ids.new_hook_id(), auth.new_hook_secret()) for _ in range(100)}
    assert len({h for h, _ in made}) == 100 and len({s for _, s in made}) == 100
    for hook_id, secret in made:
        assert ids.is_hook_id(hook_id) and len(secret) >= 43
    assert not ids.is_hook_id("hk_short") and not ids.is_hook_id("hk_" + "a" * 32 + "\n")


# ---- thread IDs --------------------------------------------------------------------------------


def test_thread_ids_an_agent_can_compute() -> None:
    assert github.pr_thread("acme/payments", 412) == "thr_gh_acme_payments_pr_412"
    assert github.issue_thread("Codertocat/Hello-World", 1) == "thr_gh_codertocat_hello-world_issue_1"
    assert github.repo_thread("octo-org/socket.io_client") == "thr_gh_octo-org_socket-io-client"
    assert github.org_thread("Octocoders") == "thr_gh_octocoders"


def test_the_same_repository_in_any_case_is_the_same_thread() -> None:
    assert github.pr_thread("ACME/Payments", 7) == github.pr_thread("acme/payments", 7)


def test_long_names_are_shortened_with_a_hash_and_stay_within_the_id_limit() -> None:
    owner, repo = "o" * 39, "r" * 100  # GitHub's longest login; repository names go to 100
    key = github.repo_key(f"{owner}/{repo}")
    digest = hashlib.sha256(f"{owner}/{repo}".encode()).hexdigest()[:8]
    assert key == "o" * 31 + f"-{digest}" and len(key) == github.KEY_MAX
    assert github.repo_key(f"{owner}/{repo}x") != key  # another long name, another hash
    for thread in (github.issue_thread(f"{owner}/{repo}", 10**12 - 1), github.pr_thread(f"{owner}/{repo}", 1)):
        assert ids.kind_of(thread) == "thread", thread
    exactly = "a" * 20 + "/" + "b" * 19  # owner_repo of exactly 40 characters is kept as it is
    assert github.repo_key(exactly) == "a" * 20 + "_" + "b" * 19


def test_unicode_names_get_a_hash_so_they_never_collide() -> None:
    a, b = github.repo_key("acme/日本"), github.repo_key("acme/中国")
    assert a != b
    for key in (a, b, github.repo_key("ácme/pågés")):
        assert re.fullmatch(r"[a-z0-9_-]{1,40}", key), key
    assert a == "acme_--" + "-" + hashlib.sha256("acme/日本".encode()).hexdigest()[:8]


def test_numbers_out_of_range_are_refused() -> None:
    for n in (0, -1, 10**12):
        with pytest.raises(github.Unmapped):
            github.pr_thread("a/b", n)


def test_one_line_summaries_are_bounded_and_have_no_control_characters() -> None:
    assert github.one_line("a\nb\r\n\tc\x00d\x7fe\u2028f") == "a b c d e f"
    assert github.one_line("x\u202ey\u2066z\u2069 \u200ew\u061c") == "xyz w"  # bidi controls: the API's rule
    long = github.one_line("word " * 100)
    assert len(long) == 200 and long.endswith("…")


# ---- GitHub's examples, mapped ----------------------------------------------------------------

# fixture -> (outcome, thread, summary)
MAPPED = {
    "pull_request.opened": ("filed", "thr_gh_codertocat_hello-world_pr_2",
                            "PR #2 opened by Codertocat: Update the README with new information."),
    "pull_request.closed": ("filed", "thr_gh_codertocat_hello-world_pr_2",
                            "PR #2 closed without merging by Codertocat: Update the README with new information."),
    "pull_request.reopened": ("filed", "thr_gh_codertocat_hello-world_pr_2",
                              "PR #2 reopened by Codertocat: Update the README with new information."),
    "issues.opened": ("filed", "thr_gh_codertocat_hello-world_issue_1",
                      "Issue #1 opened by Codertocat: Spelling error in the README file"),
    "issues.edited": ("filed", "thr_gh_codertocat_hello-world_issue_1",
                      "Issue #1 edited by Codertocat: Spelling error in the README file"),
    "issues.reopened": ("filed", "thr_gh_codertocat_hello-world_issue_1",
                        "Issue #1 reopened by Codertocat: Spelling error in the README file"),
    "issue_comment.created": ("filed", "thr_gh_codertocat_hello-world_issue_1",
                              "Comment on issue #1 by Codertocat: You are totally right! "
                              "I'll get this fixed right away."),
    "check_run.completed": ("filed", "thr_gh_codertocat_hello-world_pr_2",
                            "CI failed on PR #2: Octocoders-linter (failure)"),
    "check_suite.completed": ("filed", "thr_gh_codertocat_hello-world_pr_2",
                              "Checks passed on PR #2: octocoders-linter (success)"),
    "workflow_run.completed": ("filed", "thr_gh_octo-org_octo-repo_pr_2",
                               "Workflow passed on PR #2: unnamed (success)"),
    "pull_request_review.submitted": ("filed", "thr_gh_codertocat_hello-world_pr_2",
                                      "Review on PR #2 by Codertocat (commented)"),
    "pull_request_review_comment.created": (
        "filed", "thr_gh_codertocat_hello-world_pr_2",
        "Review comment on PR #2 by Codertocat on README.md: Maybe you should use more emoji on this line."),
    "push.event": ("filed", "thr_gh_codertocat_hello-world",
                   "Push to master by Codertocat: 1 commit, head 6113728 Initial commit"),
    "star.created": ("filed", "thr_gh_codertocat_hello-world",
                     "GitHub star created in Codertocat/Hello-World by Codertocat"),
    "organization.member_added": ("filed", "thr_gh_octocoders",
                                  "GitHub organization member added in Octocoders by Codertocat"),
    "ping.event": ("pong", None, ""),
    "check_run.created": ("ignored", None, ""),
    "workflow_run.requested": ("ignored", None, ""),
}


def test_every_fixture_is_in_the_table() -> None:
    assert {p.name.removesuffix(".json") for p in DATA.glob("*.json")} == set(MAPPED)


@pytest.mark.parametrize("name", sorted(MAPPED))
def test_githubs_example_payloads_map_as_the_readme_table_says(name: str) -> None:
    outcome, thread, summary = MAPPED[name]
    planned = github.plan(name.split(".")[0], example(name))
    assert (planned.outcome, planned.thread_id, planned.summary) == (outcome, thread, summary)
    if outcome == "filed":
        assert planned.source == "github." + name.split(".")[0]
        assert len(planned.summary) <= 200 and ONE_LINE.match(planned.summary)
        assert ids.kind_of(planned.thread_id) == "thread"
        assert 1 <= len(planned.thread_title) <= 120


def test_pull_request_status_is_open_closed_or_merged() -> None:
    payload = json.loads(example("pull_request.closed"))
    assert github.plan("pull_request", json.dumps(payload).encode()).state.status == "closed"
    payload["pull_request"]["merged"] = True
    merged = github.plan("pull_request", json.dumps(payload).encode())
    assert merged.state.status == "merged" and merged.summary.startswith("PR #2 merged by Codertocat")
    assert github.plan("pull_request", example("pull_request.reopened")).state.status == "open"


def test_a_comment_on_a_pull_request_goes_to_the_pull_requests_thread() -> None:
    payload = json.loads(example("issue_comment.created"))  # the examples only comment on issues: made a PR
    payload["issue"]["pull_request"] = {"url": "https://api.github.com/repos/Codertocat/Hello-World/pulls/1"}
    planned = github.plan("issue_comment", json.dumps(payload).encode())
    assert planned.thread_id == "thr_gh_codertocat_hello-world_pr_1"
    assert planned.summary.startswith("Comment on PR #1 by Codertocat")


def test_ci_off_any_pull_request_goes_to_the_repository_thread() -> None:
    payload = json.loads(example("check_run.completed"))
    payload["check_run"]["pull_requests"] = []
    planned = github.plan("check_run", json.dumps(payload).encode())
    assert planned.thread_id == "thr_gh_codertocat_hello-world"
    assert planned.summary == "CI failed on Codertocat/Hello-World@ec26c3e: Octocoders-linter (failure)"


def test_hostile_text_is_one_bounded_line() -> None:
    payload = json.loads(example("pull_request_review_comment.created"))
    payload["comment"]["body"] = "line one\nline two\x00\x1b[31m" + "é" * 500
    payload["pull_request"]["title"] = "t\n" * 200
    planned = github.plan("pull_request_review_comment", json.dumps(payload).encode())
    assert len(planned.summary) <= 200 and ONE_LINE.match(planned.summary)
    assert len(planned.thread_title) <= 120 and ONE_LINE.match(planned.thread_title)


@pytest.mark.parametrize("event, body, thread, reason", [
    ("pull_request", b"not json", None, "not JSON"),
    ("pull_request", b"[]", None, "Expected `object`"),
    ("pull_request", b'{"action": "opened"}', None, "no `repository`"),
    ("pull_request", b'{"action": "opened", "repository": {"full_name": "a/b"}}', "thr_gh_a_b", "no `pull_request`"),
    ("issues", b'{"repository": {"full_name": "a/b"}, '
               b'"issue": {"number": "one", "updated_at": "2020-01-01T00:00:00Z"}}', "thr_gh_a_b", "$.issue.number"),
    ("pull_request", b'{"repository": {"full_name": "a/b"}, '
                     b'"pull_request": {"number": 0, "updated_at": "2020-01-01T00:00:00Z"}}', "thr_gh_a_b", "got 0"),
    ("star", b'{"organization": {"login": "acme"}, "repository": 7}', "thr_gh_acme", "$.repository"),
])
def test_deliveries_without_the_fields_an_event_needs_are_filed_raw(event: str, body: bytes, thread: str | None,
                                                                    reason: str) -> None:
    planned = github.plan(event, body)
    assert (planned.outcome, planned.source, planned.thread_id) == ("filed", f"github.{event}", thread)
    assert "not mapped" in planned.summary and reason in planned.summary, planned.summary
    assert planned.content_type == ("application/octet-stream" if body == b"not json" else "application/json")
    assert planned.state is None and ONE_LINE.match(planned.summary)


def test_event_and_delivery_headers() -> None:
    assert github.is_event("pull_request_review_comment") and not github.is_event("Pull Request")
    assert not github.is_event("") and not github.is_event(None) and not github.is_event("a" * 65)
    assert github.is_delivery("72d3162e-cc78-11e3-81ab-4c9367dc0958") and not github.is_delivery("x y")
