"""The memory inspector of `nanobot serve` driven in a real headless Chromium (Debian's),
as a person would: sign in with the operator key, open a session, search, approve one
proposal and reject another, look at the versions. Screenshots of each page go to OUT_DIR.

Usage (a Python with playwright): inspector.py BASE_URL OPERATOR_KEY SCOPE CHROMIUM OUT_DIR.
Prints JSON: what each step saw.
"""

import json
import sys
import tempfile
from pathlib import Path
from urllib.parse import quote

from playwright.sync_api import sync_playwright


def main(base: str, key: str, scope: str, chromium: str, out: str) -> dict:
    shots = Path(out)
    shots.mkdir(parents=True, exist_ok=True)
    seen: dict = {}
    with sync_playwright() as p, tempfile.TemporaryDirectory() as profile:
        browser = p.chromium.launch_persistent_context(
            profile,
            executable_path=chromium,
            headless=True,
            viewport={"width": 1100, "height": 760},
            args=[
                "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
            ],
        )
        page = browser.new_page()
        errors: list[str] = []
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)

        page.goto(f"{base}/ui")
        seen["login_shown"] = page.url.endswith("/ui/login")
        page.fill("#key", key)
        page.click("button[type=submit]")
        page.wait_for_url(f"{base}/ui")
        seen["scopes"] = page.locator("ul.scopes li").all_inner_texts()
        page.screenshot(path=str(shots / "scopes.png"))

        page.goto(f"{base}/ui/sessions?scope={quote(scope, safe='')}")
        page.locator("table a").first.click()
        page.wait_for_selector("ol.messages")
        seen["session_messages"] = page.locator("ol.messages li").count()
        page.screenshot(path=str(shots / "session.png"), full_page=True)

        page.click("text=Search")
        page.fill("input[type=search]", "Berlin")
        page.click("form.search button")
        page.wait_for_selector("ol.hits, main p")
        seen["search_hits"] = page.locator("ol.hits li").all_inner_texts()
        page.screenshot(path=str(shots / "search.png"), full_page=True)

        page.goto(f"{base}/ui/memory?scope=agent")
        page.screenshot(path=str(shots / "memory.png"), full_page=True)

        page.goto(f"{base}/ui/review?scope=agent")
        seen["proposals_before"] = page.locator("article.proposal").count()
        page.screenshot(path=str(shots / "review.png"), full_page=True)
        page.locator("article.proposal").first.locator("button.approve").click()
        page.wait_for_load_state()
        second = page.locator("article.proposal").first
        second.locator("input[name=reason]").fill("too loud for this agent")
        second.locator("button.reject").click()
        page.wait_for_load_state()
        seen["proposals_after"] = page.locator("article.proposal").count()
        seen["decisions"] = page.locator("ul.decisions li").all_inner_texts()

        page.goto(f"{base}/ui/versions?scope=agent")
        seen["versions"] = page.locator("ul.versions li").all_inner_texts()
        page.screenshot(path=str(shots / "versions.png"))
        page.locator("ul.versions a").first.click()
        page.wait_for_selector("main pre")
        page.screenshot(path=str(shots / "version.png"), full_page=True)
        seen["console_errors"] = errors
        browser.close()
    return seen


if __name__ == "__main__":
    print(json.dumps(main(*sys.argv[1:6])))
