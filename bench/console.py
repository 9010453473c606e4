"""How long the console takes to show a thread page on the bench store, in a real browser.

    python bench/console.py --home /tmp/b      # a store bench/run.py seeded (seeds one if --home is new)

Signs in with a bench key, then opens eleven threads of the bench store (20 events each, two owners) by
ID from the console's Find page, timing each from the click until the first page of the event log is
shown (the inline view, that page and the backlinks are fetched by then). Prints each time and the
median of all but the first. Needs Debian's chromium and playwright (the `test` extra).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from playwright.sync_api import sync_playwright
from run import embedded, make_key, seed, server_env

from recall_server.process import ServerProcess

THREADS = (17, 5000, 9999, 123, 4242, 777, 8080, 31, 6500, 2024, 3333)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--home", type=Path)
    args = parser.parse_args()
    home = args.home or Path(tempfile.mkdtemp(prefix="recall-console-"))
    dsn = embedded.start(home / "data")
    server = ServerProcess(home / "console.log", "--workers", "2", **server_env(dsn, 16, 2)).start(timeout=120)
    try:
        seed(dsn)
        key = make_key(dsn)
        times = []
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium")
            page = browser.new_page()
            page.goto(server.url + "/console")
            page.wait_for_selector("body[data-ready='1']")
            page.fill("#key", key)
            page.click("#sign-in button")
            page.wait_for_selector("#nav:not([hidden])")
            for n in THREADS:
                page.evaluate("f => { location.hash = f }", "#/")
                page.fill("#goto-id", f"thr_b{n}")
                started = time.perf_counter()
                page.click("#goto button")
                page.wait_for_selector("#events li.event")
                times.append((time.perf_counter() - started) * 1000)
            browser.close()
    finally:
        server.stop()
    print(f"thread page, ms: {[round(t) for t in times]}; median after the first: {statistics.median(times[1:]):.0f}")


if __name__ == "__main__":
    main()
