"""The labelled retrieval set's store: agent-memory objects across a dozen stories, and the text a ranking sees.

Each story has the objects an agent asks about (the targets of bench/retrieval/queries.py) and routine
neighbours that share its vocabulary (green CI runs, dependency bumps, deploys, standup notes, other PRs),
so a ranking must tell the failure from the hundred passes around it. `OBJECTS` is fixed: every run, every
machine seeds the same store (the routine objects come from a seeded random generator).
"""

from __future__ import annotations

import json
import random
from typing import Any

from recall_server.demo import ci_log as pr_412_log


def thread(id: str, title: str, summary: str = "", status: str = "open", owners: tuple[str, ...] = ()) -> dict:
    return {"type": "thread", "id": id, "title": title, "summary": summary, "status": status, "owners": list(owners)}


def worker(id: str, name: str, summary: str) -> dict:
    return {"type": "worker", "id": id, "name": name, "summary": summary}


def trigger(id: str, source: str, summary: str, payload: Any, thread_id: str | None = None,
            neighbours: tuple[str, ...] = ()) -> dict:
    return {"type": "trigger", "id": id, "source": source, "summary": summary, "payload": payload,
            "thread_id": thread_id, "neighbours": list(neighbours)}


def report(id: str, worker_id: str, thread_id: str, summary: str, body: str, refs: tuple[str, ...] = ()) -> dict:
    return {"type": "report", "id": id, "worker_id": worker_id, "thread_id": thread_id, "summary": summary,
            "body": body, "refs": list(refs)}


def memory(id: str, namespace: str, key: str, value: Any, summary: str = "", kind: str = "fact") -> dict:
    return {"type": "memory", "id": id, "namespace": namespace.split("/"), "key": key, "kind": kind,
            "value": value, "summary": summary}


def pytest_log(passed: list[str], failed: list[tuple[str, str]] = (), seconds: float = 61.4) -> str:
    """A short pytest log: the passes, then the failures with their error line, then the tally."""
    lines = ["============================= test session starts ==============================",
             "platform linux -- Python 3.12.3, pytest-8.3.2", f"collected {len(passed) + len(failed)} items", ""]
    lines += [f"PASSED {name}" for name in passed]
    lines += [f"FAILED {name} - {error}" for name, error in failed]
    tally = f"{len(failed)} failed, {len(passed)} passed" if failed else f"{len(passed)} passed"
    lines.append(f"=== {tally} in {seconds:.2f}s ===")
    return "\n".join(lines) + "\n"


STORIES: list[dict] = [
    # -- payments: PR #412, the charge that times out (recall_server/demo.py's story, and its neighbours) --
    worker("wkr_77a0", "payments-fixer", "sub-agent that fixes payment retries"),
    thread("thr_pr_412", "payments retry PR", "PR #412: add retry logic to the payments client", "merged",
           owners=("wkr_77a0",)),
    trigger("trg_8f1c", "github.pull_request_review_comment", "review comment asking for retry logic",
            {"user": "reviewer", "path": "payments/client.py", "pull_request": {"number": 412},
             "body": "Please add retry logic around charge(); a single slow answer from the provider fails the order."},
            "thr_pr_412"),
    trigger("trg_8f21", "github.check_run", "CI failed on PR #412: 3 of 118 tests red in payments/",
            pr_412_log(), "thr_pr_412", neighbours=("trg_8f1c",)),
    report("rpt_412a", "wkr_77a0", "thr_pr_412",
           "CI red on payments: the charge call times out; fixed with backoff",
           "Investigated trg_8f21: payment timeout in test_retry_charge. PaymentGatewayError is raised after 30 s "
           "because the sandbox gateway stalls under load. The client now retries with exponential backoff "
           "(3 attempts: 0.5, 1 and 2 s) and sends the same idempotency key on every attempt, so a retried "
           "charge is never billed twice.", refs=("trg_8f21",)),
    trigger("trg_8f3a", "github.check_run", "CI passed on PR #412 after the backoff change",
            pytest_log([f"payments/test_client.py::test_case_{i:03d}" for i in range(12)]), "thr_pr_412"),
    memory("mem_pay_gateway", "teams/payments", "gateway_timeout",
           "The sandbox gateway answers within 30 s or not at all. Tests may shorten the wait with "
           "PAYMENTS_GATEWAY_TIMEOUT=5.", "sandbox gateway gives up after 30 s"),
    memory("mem_pay_retry", "teams/payments", "retry_policy",
           "Retry charge() at most 3 times with exponential backoff, and always send the same Idempotency-Key "
           "so the provider deduplicates.", "the charge retry rule", kind="procedure"),
    thread("thr_pr_398", "refund webhook handler", "PR #398: handle charge.refunded events from the provider",
           "merged", owners=("wkr_77a0",)),
    trigger("trg_7d02", "github.pull_request", "PR #398 opened: refund webhook handler",
            {"action": "opened", "number": 398, "title": "Handle charge.refunded webhooks",
             "body": "Marks the order refunded when the provider sends charge.refunded; replays are ignored."},
            "thr_pr_398"),
    report("rpt_398a", "wkr_77a0", "thr_pr_398", "refund events handled; replays ignored by event id",
           "The handler stores each provider event id; a second delivery of the same event is acknowledged "
           "with 200 and changes nothing.", refs=("trg_7d02",)),

    # -- checkout: the flaky cart total --
    worker("wkr_c0de", "flake-hunter", "sub-agent that quarantines and fixes flaky tests"),
    thread("thr_checkout_flake", "checkout: test_cart_total flaky",
           "test_cart_total fails about 1 run in 20 on arm64 runners", owners=("wkr_c0de",)),
    trigger("trg_c1a1", "github.check_run", "CI failed on main: checkout/test_cart.py::test_cart_total",
            pytest_log([f"checkout/test_cart.py::test_item_{i:03d}" for i in range(20)],
                       [("checkout/test_cart.py::test_cart_total",
                         "AssertionError: assert 19.999999999999996 == 20.0")]), "thr_checkout_flake"),
    trigger("trg_c1a2", "github.check_run", "CI failed on PR #430: test_cart_total again (arm64 runner)",
            pytest_log([f"checkout/test_promo.py::test_code_{i:03d}" for i in range(15)],
                       [("checkout/test_cart.py::test_cart_total",
                         "AssertionError: assert 39.989999999999995 == 39.99")]), "thr_checkout_flake"),
    trigger("trg_c1a3", "github.issue_comment", "maria takes the cart total flake",
            {"user": "maria", "body": "Assigning myself: the cart flake is ours (checkout squad). Quarantine it meanwhile."},
            "thr_checkout_flake"),
    report("rpt_c0de1", "wkr_c0de", "thr_checkout_flake",
           "cart total flake: float sums of line items round differently on arm64; use Decimal",
           "Root cause: cart_total() in checkout/cart.py adds floats, and summing discounted line items in a "
           "different order gives 19.999999999999996 instead of 20.0. Fix: Decimal arithmetic, quantized to "
           "cents at the end. The test is quarantined until the fix merges.", refs=("trg_c1a1", "trg_c1a2")),
    memory("mem_owner_checkout", "org/owners", "checkout",
           "checkout squad; lead @maria; pages go to #checkout-oncall", "who owns checkout"),
    memory("mem_flaky_policy", "org/ci", "flaky_test_policy",
           "A test that fails twice in a week with no code change is marked @pytest.mark.quarantine, an issue is "
           "filed, and its owner has 5 working days to fix or delete it.", "what happens to unreliable tests",
           kind="procedure"),
    thread("thr_pr_430", "checkout: apply promo codes at cart level", "PR #430: one code for the whole cart"),

    # -- auth: INC-311, sign-ins rejected after a key rotation --
    worker("wkr_4a11", "incident-scribe", "sub-agent that writes incident timelines and postmortems"),
    thread("thr_inc_0311", "INC-311: login failures after signing key rotation",
           "Sev2, 14:02-14:49 UTC: 38% of sign-ins rejected with E1102 after the JWT signing key rotated",
           "resolved", owners=("wkr_4a11",)),
    trigger("trg_s3e1", "sentry.issue", "E1102 TokenSignatureInvalid spiking in auth-service",
            {"title": "E1102 TokenSignatureInvalid: signature verification failed",
             "culprit": "auth/jwt.py in verify_token", "count": 18234, "level": "error"}, "thr_inc_0311"),
    trigger("trg_s3e2", "pagerduty.incident", "auth-service error rate above 5%, primary paged",
            {"service": "auth-service", "urgency": "high", "assignee": "kofi", "title": "Error rate 38% > 5%"},
            "thr_inc_0311"),
    trigger("trg_s3e3", "slack.message", "#incidents: rollback of the key rotation started",
            {"channel": "incidents", "user": "kofi", "text": "rolling back the kid rotation, old key re-added to JWKS"},
            "thr_inc_0311"),
    report("rpt_4a11a", "wkr_4a11", "thr_inc_0311",
           "Postmortem INC-311: the new signing key reached the issuer before the verifiers' JWKS cache refreshed",
           "Timeline: 14:02 issuer switched to kid 2024-03; 14:05 E1102 alerts; 14:31 rollback; 14:49 recovered. "
           "Root cause: auth-gateway caches the JWKS for 1 h, so it kept verifying with the old key set. Action "
           "items: publish a new key 24 h before it signs; cut the JWKS cache to 5 min; alert on the E1102 rate.",
           refs=("trg_s3e1", "trg_s3e2", "trg_s3e3")),
    memory("mem_proc_rotate", "runbooks/auth", "rotate_signing_key",
           "1. Add the new key to the JWKS as inactive. 2. Wait 24 h (the longest JWKS cache). 3. Switch the "
           "issuer's active kid. 4. Remove the old key after the longest token lifetime (12 h).",
           "rotating the JWT key", kind="procedure"),
    memory("mem_fact_e1102", "errors/auth", "E1102",
           "The token's signature did not verify against any key in the JWKS: a rotated or unknown kid, or a "
           "token minted in another environment.", "meaning of E1102"),
    thread("thr_pr_455", "auth: shorten JWKS cache to 5 minutes", "PR #455, an action item of INC-311", "merged"),

    # -- search: the nightly reindex killed for memory --
    worker("wkr_5e4c", "index-keeper", "sub-agent that runs and repairs the catalog search index"),
    thread("thr_reindex_oom", "nightly catalog reindex OOMKilled",
           "the reindex-catalog CronJob dies at its 2 GiB limit since the catalog passed 4M products", "resolved",
           owners=("wkr_5e4c",)),
    trigger("trg_k8s1", "kubernetes.event", "Pod reindex-catalog-28475 OOMKilled (exit 137)",
            {"reason": "OOMKilled", "exitCode": 137, "pod": "reindex-catalog-28475", "container": "reindexer",
             "limits": {"memory": "2Gi"}}, "thr_reindex_oom"),
    trigger("trg_k8s2", "kubernetes.event", "CronJob reindex-catalog missed its start deadline",
            {"reason": "MissedSchedule", "cronjob": "reindex-catalog", "startingDeadlineSeconds": 600},
            "thr_reindex_oom"),
    report("rpt_5e4c1", "wkr_5e4c", "thr_reindex_oom",
           "reindex OOM: bulk batches held 10k documents with their vectors; now 500, streamed",
           "bulk_index() in search/reindex.py built each bulk request from 10,000 products plus their vectors "
           "in memory. It now streams from a server-side cursor and sends 500 documents per request; peak "
           "memory fell from 2.1 GiB to 380 MiB.", refs=("trg_k8s1",)),
    memory("mem_search_batch", "services/search", "bulk_batch_size",
           "500 documents per bulk request; above about 2,000 the reindexer grows past its 2 GiB limit.",
           "reindex batch size"),
    thread("thr_search_synonyms", "search: synonyms for sneakers and trainers",
           "shoppers typing 'trainers' find nothing; add a synonyms file to the analyzer"),
    trigger("trg_zd_5521", "zendesk.ticket", "Ticket #5521: search for trainers returns no results",
            {"requester": "Olivia", "subject": "Nothing found", "body": "I typed trainers and got an empty page, "
             "but your homepage shows them."}, "thr_search_synonyms"),

    # -- security: a vulnerable dependency and a leaked token --
    worker("wkr_5ec0", "security-triage", "sub-agent that triages advisories and merges security bumps"),
    thread("thr_sec_urllib3", "bump urllib3 for CVE-2023-45803",
           "dependabot security update: urllib3 1.26.17 -> 1.26.18 (request body kept on a 303 redirect)",
           "merged", owners=("wkr_5ec0",)),
    trigger("trg_dep_101", "github.pull_request", "dependabot opened PR #441: bump urllib3 from 1.26.17 to 1.26.18",
            {"action": "opened", "number": 441, "user": "dependabot[bot]",
             "body": "Bumps urllib3 to 1.26.18. Advisory GHSA-g4mx-q9vg-27p4: request body not stripped after a "
                     "303 redirect."}, "thr_sec_urllib3"),
    trigger("trg_dep_102", "github.check_run", "CI passed on PR #441",
            pytest_log([f"tests/test_http.py::test_call_{i:03d}" for i in range(18)]), "thr_sec_urllib3"),
    report("rpt_sec1", "wkr_5ec0", "thr_sec_urllib3",
           "urllib3 advisory: we never follow redirects with a body; low risk, bumped anyway",
           "Our outbound calls are GETs or POSTs to fixed hosts with redirects disabled, so the advisory does "
           "not apply. Merged the bump with CI green.", refs=("trg_dep_101", "trg_dep_102")),
    memory("mem_sec_policy", "org/security", "patch_sla",
           "Critical CVEs patched within 48 h, high within 7 days, the rest in the next release. Dependabot "
           "PRs are merged by security-triage when CI is green.", "patch deadlines", kind="procedure"),
    thread("thr_sec_secrets", "leaked staging token in a public gist",
           "a staging API token was pasted in a public gist; revoked within 20 min", "resolved",
           owners=("wkr_5ec0",)),
    trigger("trg_gg_1", "gitguardian.incident", "GitGuardian: generic high-entropy secret in a public gist",
            {"detector": "generic_high_entropy_secret", "visibility": "public", "occurrences": 1},
            "thr_sec_secrets"),
    memory("mem_secret_proc", "runbooks/security", "leaked_credential",
           "Revoke first, then rotate whatever depended on it, then search the access logs for use since the "
           "moment it was exposed, then write it up.", "exposed secret runbook", kind="procedure"),

    # -- database: a migration that locked the orders table --
    worker("wkr_db01", "schema-migrator", "sub-agent that writes and reviews database migrations"),
    thread("thr_deploy_0042", "deploy 2024.05.2 stalled on migration 0042_add_order_index",
           "ALTER TABLE held an ACCESS EXCLUSIVE lock on orders for 11 min; checkout writes queued", "resolved",
           owners=("wkr_db01",)),
    trigger("trg_dep_0042", "argo.deploy", "deploy 2024.05.2 stuck in its PreSync hook",
            "PreSync: running migrations\nApplying 0041_add_gift_cards... OK\nApplying 0042_add_order_index...\n"
            "still waiting after 60s\nstill waiting after 300s\nstill waiting after 600s\n", "thr_deploy_0042"),
    trigger("trg_pg_lock", "datadog.monitor", "orders write latency p99 above 10 s",
            {"monitor": "orders-write-latency", "value": "11.8s", "threshold": "10s", "tags": ["db:orders-db"]},
            "thr_deploy_0042"),
    report("rpt_db01a", "wkr_db01", "thr_deploy_0042",
           "0042 lock: the index build without CONCURRENTLY blocked writes; redone concurrently in 0043",
           "0042 ran CREATE INDEX on orders inside the migration transaction, which blocks every write until it "
           "ends. 0043 drops it and runs CREATE INDEX CONCURRENTLY on its own; all migrations now set "
           "lock_timeout = '3s' so a blocked one fails fast instead of queueing writes.",
           refs=("trg_dep_0042", "trg_pg_lock")),
    memory("mem_mig_rules", "runbooks/db", "migration_rules",
           "Indexes on hot tables: CREATE INDEX CONCURRENTLY in a migration of its own. Every migration sets "
           "lock_timeout = '3s'. Never rewrite a large table during business hours.", "schema change rules",
           kind="procedure"),
    thread("thr_pg_upgrade", "upgrade PostgreSQL 15 to 16 on orders-db", "pg_upgrade --link, then ANALYZE"),
    trigger("trg_pg_up1", "slack.message", "maintenance window approved for Sunday 02:00 UTC",
            {"channel": "ops", "user": "ines", "text": "Approved: orders-db upgrade Sunday 02:00-04:00 UTC."},
            "thr_pg_upgrade"),

    # -- people: what agents remember about their users --
    memory("mem_u_ana_tz", "users/u_ana", "timezone", "Europe/Lisbon", "Ana works from Lisbon", kind="profile"),
    memory("mem_u_ana_lang", "users/u_ana", "language", "Portuguese, unless the thread is in English",
           "reply language", kind="preference"),
    memory("mem_u_ana_style", "users/u_ana", "tone",
           "concise; skip greetings; no list longer than five items", "how to write to Ana", kind="preference"),
    memory("mem_u_bob_sum", "users/u_bob", "pr_summary_format",
           "Bullet points: what changed, why, the risk; link the PR; at most 120 words.", "PR summary format",
           kind="preference"),
    memory("mem_u_bob_tz", "users/u_bob", "timezone", "America/Chicago", "Bob's timezone", kind="profile"),
    memory("mem_u_bob_role", "users/u_bob", "role",
           "staff engineer on payments; reviews every change to payments/client.py", "Bob's role", kind="profile"),
    memory("mem_u_chen_notify", "users/u_chen", "notifications",
           "Only page me for Sev1; everything else waits for the morning digest.", "when to page Chen",
           kind="preference"),
    memory("mem_u_chen_style", "users/u_chen", "code_style",
           "type hints everywhere, small pure functions, no mocks in tests", "Chen's code preferences",
           kind="preference"),
    memory("mem_u_dana_ooo", "users/u_dana", "out_of_office",
           "Away 2024-06-10 to 2024-06-21; Bob covers her reviews.", "Dana away in June"),

    # -- github: the sync that hit the secondary rate limit --
    worker("wkr_9b17", "repo-sync", "sub-agent that mirrors issues and pull requests from GitHub"),
    thread("thr_gh_ratelimit", "repo-sync blocked by GitHub secondary rate limit",
           "403 'secondary rate limit' every hour from 09:00; mirrored issues stale for up to 40 min", "resolved",
           owners=("wkr_9b17",)),
    trigger("trg_gh_403", "http.error", "GitHub API 403 on GET /repos/shop/web/issues",
            {"status": 403, "message": "You have exceeded a secondary rate limit. Please wait a few minutes before "
                                       "you try again.", "request": "GET /repos/shop/web/issues?state=all"},
            "thr_gh_ratelimit"),
    trigger("trg_gh_hdr", "http.response", "x-ratelimit-remaining dropped to 0 at 09:14",
            {"headers": {"x-ratelimit-limit": "5000", "x-ratelimit-remaining": "0",
                         "x-ratelimit-reset": "1717146000"}}, "thr_gh_ratelimit"),
    report("rpt_9b17a", "wkr_9b17", "thr_gh_ratelimit",
           "rate limit: sync fetched every repo at once; now one at a time with ETags and Retry-After",
           "The sync opened 120 concurrent requests on the hour. It now walks repos one at a time, sends "
           "If-None-Match with the last ETag (a 304 costs nothing) and waits for Retry-After when told to.",
           refs=("trg_gh_403", "trg_gh_hdr")),
    memory("mem_gh_limits", "services/github", "rate_limits",
           "REST: 5,000 requests an hour per token; secondary: at most 100 concurrent requests and 900 points a "
           "minute; a conditional request answered 304 is free.", "GitHub API quotas"),
    thread("thr_gh_app", "move repo-sync from a personal access token to a GitHub App",
           "an App installation gets 15,000 requests an hour"),

    # -- web: the product page slowed by a carousel --
    worker("wkr_f3e0", "web-perf", "sub-agent that watches Lighthouse CI and fixes page speed"),
    thread("thr_lcp_regress", "product page LCP regressed from 2.1 s to 3.8 s",
           "since the image carousel shipped in web 5.14", "resolved", owners=("wkr_f3e0",)),
    trigger("trg_lh_1", "lighthouse.ci", "Lighthouse CI: LCP 3.8 s on /p/[slug] (budget 2.5 s)",
            {"url": "/p/[slug]", "metrics": {"lcp_ms": 3810, "cls": 0.04, "inp_ms": 160}, "budget": {"lcp_ms": 2500}},
            "thr_lcp_regress"),
    trigger("trg_lh_2", "github.pull_request", "PR #463: lazy-load carousel images below the fold",
            {"action": "opened", "number": 463, "title": "Lazy-load carousel images below the fold"},
            "thr_lcp_regress"),
    report("rpt_f3e0a", "wkr_f3e0", "thr_lcp_regress",
           "LCP: the carousel lazy-loaded its first slide, so the hero image came last",
           "web/src/components/Carousel.tsx set loading=lazy on every slide, the first included. Slide 1 is now "
           "eager with fetchpriority=high and the rest stay lazy: LCP 2.0 s at p75.", refs=("trg_lh_1", "trg_lh_2")),
    memory("mem_web_budget", "services/web", "perf_budget",
           "LCP 2.5 s, CLS 0.1, INP 200 ms at p75 on a mid-range phone; Lighthouse CI fails above.",
           "web vitals budget"),
    thread("thr_cls_banner", "cookie banner shifts the layout", "CLS 0.27 on first visit when the banner mounts"),

    # -- billing: yen amounts printed with decimals --
    worker("wkr_b111", "billing-support", "sub-agent that answers billing tickets"),
    thread("thr_jpy_decimals", "JPY invoices show two decimal places",
           "format_amount() assumes two minor units; the yen has none", owners=("wkr_b111",)),
    trigger("trg_zd_6120", "zendesk.ticket", "Ticket #6120: invoice shows ¥1,200.00",
            {"requester": "Tanaka", "body": "Our invoice lists ¥1,200.00. The yen has no decimals and our "
                                            "accountant rejected it."}, "thr_jpy_decimals"),
    report("rpt_b111a", "wkr_b111", "thr_jpy_decimals",
           "currency exponents: format_amount now reads the ISO 4217 minor units",
           "billing/money.py format_amount() printed every amount with 2 decimals. It now takes the exponent "
           "from the ISO 4217 table: JPY and KRW 0, BHD 3, the rest 2. Ticket #6120 answered.",
           refs=("trg_zd_6120",)),
    memory("mem_billing_currencies", "services/billing", "supported_currencies",
           "EUR, USD, GBP, JPY, KRW; amounts stored as integer minor units.", "currencies we bill in"),
    thread("thr_vat_oss", "EU VAT one-stop-shop return for Q2", "file by 31 July"),
    trigger("trg_vat_1", "cron", "reminder: OSS VAT return due 31 July", {"job": "tax-reminders", "due": "07-31"},
            "thr_vat_oss"),

    # -- email-worker: a memory leak --
    worker("wkr_e7a2", "queue-doctor", "sub-agent that keeps the background workers healthy"),
    thread("thr_leak_emailer", "email-worker RSS grows 300 MB a day", "restarted by the OOM killer every ~5 days",
           "resolved", owners=("wkr_e7a2",)),
    trigger("trg_graf_1", "grafana.alert", "email-worker memory above 1.5 GiB",
            {"alert": "WorkerMemoryHigh", "value": "1.61GiB", "pod": "email-worker-7c9"}, "thr_leak_emailer"),
    trigger("trg_k8s3", "kubernetes.event", "Pod email-worker-7c9 restarted (OOMKilled)",
            {"reason": "OOMKilled", "exitCode": 137, "pod": "email-worker-7c9"}, "thr_leak_emailer"),
    report("rpt_e7a2a", "wkr_e7a2", "thr_leak_emailer",
           "leak: a new httpx.Client per message, never closed",
           "tracemalloc's top entries were SSL contexts: send_email() built an httpx.Client for each message and "
           "never closed it. One shared client, closed on shutdown; RSS is flat at 210 MB.",
           refs=("trg_graf_1", "trg_k8s3")),
    memory("mem_worker_concurrency", "services/email-worker", "concurrency",
           "prefetch 8, 4 processes per pod", "how much work each mail pod takes", kind="state"),

    # -- the organisation: owners, on-call, releases --
    memory("mem_proc_release", "runbooks/release", "cut_release",
           "Tag vYYYY.MM.N on main, run `make release`, wait for staging, smoke-test checkout, then "
           "`argo promote web` to production.", "how to release", kind="procedure"),
    memory("mem_repo_branch", "repos/shop-web", "default_branch", "main; release branches are release/2024.05",
           "shop-web branches"),
    memory("mem_oncall", "org/oncall", "this_week",
           "primary: Bob (payments); secondary: Maria (checkout); the rotation changes Monday 10:00 UTC",
           "current rotation", kind="state"),
    thread("thr_release_2024_06", "release 2024.06.1", "changelog: promo codes, JWKS cache, urllib3 bump"),
    memory("mem_owner_search", "org/owners", "search", "discovery squad; lead @ines", "who owns search"),
    memory("mem_owner_payments", "org/owners", "payments", "payments squad; lead @bob", "who owns payments"),
    memory("mem_owner_auth", "org/owners", "auth", "identity squad; lead @kofi", "who owns auth"),
]


# Routine objects: what fills an agent's store between the incidents. Titles and summaries are varied by hand;
# counts and numbers come from a seeded generator.
PR_TITLES = [
    "add dark mode toggle to account settings", "paginate order history", "cache product images at the CDN",
    "move feature flags to a config service", "type-check the web client with strict mode",
    "rename ShopUser to Customer", "split the monolith's admin routes", "add a health check to the cart service",
    "log request ids in every service", "drop Python 3.9 support", "add wishlist sharing links",
    "use server-sent events for order status", "upgrade React to 19", "gzip the sitemap",
    "add a CSV export of invoices", "show delivery estimates on the product page",
    "store addresses in a separate table", "replace moment.js with date-fns",
    "add keyboard navigation to the menu", "batch analytics events", "translate the footer into German",
    "add an index on reviews.product_id", "support Apple Pay on mobile web", "remove the legacy coupon API",
    "add rate limiting to the public API", "paginate the admin users list", "add OpenTelemetry traces to checkout",
    "tidy README setup steps", "seed the local database with fixtures", "enable HTTP/2 on the edge proxy",
]
PACKAGES = [("requests", "2.31.0", "2.32.3"), ("django", "4.2.11", "4.2.13"), ("pytest", "8.1.1", "8.2.2"),
            ("react", "18.2.0", "18.3.1"), ("typescript", "5.4.5", "5.5.2"), ("boto3", "1.34.90", "1.34.120"),
            ("celery", "5.3.6", "5.4.0"), ("pydantic", "2.7.1", "2.7.4"), ("eslint", "8.57.0", "9.4.0"),
            ("sqlalchemy", "2.0.29", "2.0.30"), ("webpack", "5.91.0", "5.92.0"), ("redis", "5.0.3", "5.0.4"),
            ("gunicorn", "21.2.0", "22.0.0"), ("vite", "5.2.10", "5.2.13"), ("numpy", "1.26.4", "2.0.0")]
STANDUP_ITEMS = [
    "reviewed the promo code PR", "paired on the admin routes split", "wrote the sitemap compression",
    "triaged three support tickets", "updated the staging fixtures", "looked at slow admin pages",
    "planned next sprint's work", "demoed wishlist sharing", "cleaned up old feature flags",
    "answered questions about the delivery estimates", "read the OpenTelemetry docs", "fixed a typo in the footer",
    "rebased the React upgrade", "measured the CDN hit rate", "wrote tests for CSV export",
]
GLOSSARY = [
    ("SKU", "stock keeping unit: one sellable variant of a product (size and colour)"),
    ("PDP", "product detail page, /p/[slug] in the web app"),
    ("PLP", "product listing page: a category or search result grid"),
    ("AOV", "average order value, reported weekly by finance"),
    ("OSS", "the EU VAT one-stop-shop scheme we file under"),
    ("kid", "key id: names the key a JWT was signed with"),
    ("JWKS", "the JSON Web Key Set the auth service publishes for verifiers"),
    ("RMA", "return merchandise authorisation: a return the warehouse accepted"),
    ("BOPIS", "buy online, pick up in store; piloted in Porto"),
    ("3DS", "3-D Secure: the card issuer's extra check at payment"),
    ("SLO", "service level objective: 99.9% of checkout requests under 800 ms"),
    ("DLQ", "dead letter queue: messages a worker gave up on after 5 tries"),
]
SERVICE_FACTS = [
    ("services/cart", "port", "8081 locally; cart.internal:443 in the cluster"),
    ("services/cart", "dashboard", "grafana folder 'Cart', board 'cart-overview'"),
    ("services/api", "base_url", "https://api.shop.example/v2"),
    ("services/api", "deprecations", "v1 endpoints answer with a Sunset header until 2024-12-31"),
    ("services/web", "node_version", "Node 20 LTS; .nvmrc pins 20.14"),
    ("services/web", "build_command", "pnpm build; output in web/dist"),
    ("services/search", "engine", "OpenSearch 2.13, three data nodes"),
    ("services/billing", "invoice_numbering", "INV-YYYY-NNNNNN, gapless per year"),
    ("services/email-worker", "provider", "transactional mail through Postmark, one server per region"),
    ("services/auth", "token_lifetime", "access tokens 15 min, refresh tokens 12 h"),
    ("repos/shop-api", "default_branch", "main; hotfixes branch from the last tag"),
    ("repos/shop-api", "test_command", "make test (pytest -n 4 against a throwaway database)"),
    ("org/calendar", "sprint_length", "two weeks, starting on Wednesdays"),
    ("org/calendar", "code_freeze", "no production deploys after Thursday 16:00 UTC"),
    ("org/ci", "runners", "GitHub-hosted ubuntu-latest plus self-hosted arm64 runners for checkout"),
]
CHATTER = [
    ("general", "lunch order closes at 11:30"), ("random", "who left a mug in the meeting room"),
    ("web", "design review moved to Thursday"), ("api", "anyone seen slow staging today? fine now"),
    ("ops", "rotating the staging TLS certificate at 15:00, expect a blip"),
    ("general", "all-hands slides are in the shared drive"), ("checkout", "promo code copy approved by marketing"),
    ("payments", "provider dashboard login moved to SSO"), ("search", "ranking experiment B is at 10% of traffic"),
    ("billing", "finance wants the May invoice export by Friday"),
]


def routine() -> list[dict]:
    rand = random.Random(412)
    objects: list[dict] = [worker("wkr_5a11", "standup-notes", "sub-agent that writes the daily standup notes"),
                           worker("wkr_d3b0", "dependency-bot", "sub-agent that lands dependency updates"),
                           thread("thr_deploys", "production deploys", "every deploy of web and api", owners=())]
    for i, title in enumerate(PR_TITLES):
        number = 300 + i * 3
        objects.append(thread(f"thr_pr_{number}", title, f"PR #{number}", rand.choice(["merged", "open", "closed"])))
        tests = [f"tests/test_{title.split()[1]}_{j:02d}.py::test_ok" for j in range(rand.randint(6, 14))]
        objects.append(trigger(f"trg_ci_{number}", "github.check_run", f"CI passed on PR #{number}: {len(tests)} tests green",
                               pytest_log(tests, seconds=rand.uniform(30, 200)), f"thr_pr_{number}"))
        if i % 2 == 0:
            objects.append(trigger(f"trg_rv_{number}", "github.pull_request_review", f"PR #{number} approved",
                                   {"state": "approved", "user": rand.choice(["bob", "maria", "ines", "kofi"]),
                                    "body": "LGTM"}, f"thr_pr_{number}"))
    for name, old, new in PACKAGES:
        tid = f"thr_bump_{name}"
        objects.append(thread(tid, f"bump {name} from {old} to {new}", "dependabot version update", "merged",
                              owners=("wkr_d3b0",)))
        objects.append(trigger(f"trg_bump_{name}", "github.pull_request",
                               f"dependabot opened a PR: bump {name} from {old} to {new}",
                               {"action": "opened", "user": "dependabot[bot]", "body": f"Bumps {name} to {new}."}, tid))
        objects.append(report(f"rpt_bump_{name}", "wkr_d3b0", tid, f"{name} {new} merged: CI green, no code change",
                              f"Release notes read; nothing we use changed. Merged {name} {new}.",
                              refs=(f"trg_bump_{name}",)))
    for i in range(24):
        version = f"5.{i + 1}" if i % 2 == 0 else f"api 3.{i}"
        target = "web" if i % 2 == 0 else "api"
        objects.append(trigger(f"trg_deploy_{i:02d}", "argo.deploy", f"deployed {target} {version} to production",
                               f"sync ok\nrollout {target}: {rand.randint(3, 9)} of {rand.randint(9, 12)} pods ready\n"
                               "rollout complete\n", "thr_deploys"))
    for day in range(1, 25):
        items = rand.sample(STANDUP_ITEMS, 3)
        objects.append(report(f"rpt_standup_{day:02d}", "wkr_5a11", "thr_deploys" if day % 6 == 0 else
                              f"thr_pr_{300 + (day % 30) * 3}", f"standup 2024-05-{day:02d}",
                              "Yesterday: " + "; ".join(items[:2]) + ". Today: " + items[2] + ". No blockers."))
    for namespace, key, value in SERVICE_FACTS:
        objects.append(memory(f"mem_{namespace.split('/')[1].replace('-', '_')}_{key}", namespace, key, value))
    for i, (channel, text_) in enumerate(CHATTER):
        objects.append(trigger(f"trg_chat_{i:02d}", "slack.message", f"#{channel}: {text_}",
                               {"channel": channel, "text": text_}))
    for term, meaning in GLOSSARY:
        objects.append(memory(f"mem_glossary_{term.lower()}", "org/glossary", term, meaning, f"what {term} means"))
    return objects


OBJECTS: list[dict] = STORIES + routine()


def text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def document(obj: dict, limit: int = 2000) -> str:
    """The text an in-process ranking embeds for an object: its name, summary and the head of its content."""
    kind = obj["type"]
    if kind == "thread":
        parts = [obj["title"], obj["summary"]]
    elif kind == "worker":
        parts = [obj["name"], obj["summary"]]
    elif kind == "trigger":
        parts = [obj["source"], obj["summary"], text(obj["payload"])]
    elif kind == "report":
        parts = [obj["summary"], obj["body"]]
    else:
        parts = ["/".join(obj["namespace"]) + " " + obj["key"], obj["summary"], text(obj["value"])]
    return "\n".join(p for p in parts if p)[:limit]


def seed(client: Any) -> None:
    """Create every object through the HTTP API (a `recall_server.client.RecallClient`), in an order that keeps
    every link live; a store that holds the set already is left as it is."""
    from recall_server.client import NotFound

    try:
        client.get(OBJECTS[-1]["id"])
        return
    except NotFound:
        pass
    order = {"worker": 0, "thread": 1, "trigger": 2, "report": 3, "memory": 4}
    for obj in sorted(OBJECTS, key=lambda o: order[o["type"]]):
        kind, oid = obj["type"], obj["id"]
        if kind == "worker":
            client.create_worker(id=oid, name=obj["name"], summary=obj["summary"])
        elif kind == "thread":
            client.create_thread(id=oid, title=obj["title"], summary=obj["summary"], status=obj["status"])
            for owner in obj["owners"]:
                client.assign_owner(oid, owner)
        elif kind == "trigger":
            fields = {"content_type": "text/plain"} if isinstance(obj["payload"], str) else {}
            client.create_trigger(id=oid, source=obj["source"], summary=obj["summary"], payload=obj["payload"],
                                  thread_id=obj["thread_id"], neighbours=obj["neighbours"], **fields)
        elif kind == "report":
            client.create_report(obj["worker_id"], id=oid, thread_id=obj["thread_id"], summary=obj["summary"],
                                 body=obj["body"], refs=obj["refs"])
        else:
            client.remember(id=oid, namespace=obj["namespace"], key=obj["key"], kind=obj["kind"],
                            value=obj["value"], summary=obj["summary"])
